package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrComponentsMissing means hack/e2e-components.sh has not built every component yet.
var ErrComponentsMissing = errors.New("e2e components are not built")

// Components are the paths of the binaries hack/e2e-components.sh builds.
type Components struct {
	Etcd, KubeAPIServer, KubeControllerManager, CSIProvisioner, Helm, Kubeconform string
	// CSISnapshotter and SnapshotController are the external-snapshotter's binaries,
	// SnapshotCRDs the directory of its VolumeSnapshot CRDs.
	CSISnapshotter, SnapshotController, SnapshotCRDs string
}

// LoadComponents asks hack/e2e-components.sh (under repoRoot) for the component paths. With
// build it lets the script build what is missing first (minutes on a fresh machine,
// seconds when cached); without, it only reports ErrComponentsMissing for what is absent.
func LoadComponents(ctx context.Context, repoRoot string, build bool, log io.Writer) (Components, error) {
	script := filepath.Join(repoRoot, "hack", "e2e-components.sh")
	args := []string{"--paths"}
	if build {
		args = nil
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return Components{}, fmt.Errorf("%s: %w", script, err)
	}
	paths := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			paths[k] = v
		}
	}
	c := Components{
		Etcd:                  paths["EFS_E2E_ETCD"],
		KubeAPIServer:         paths["EFS_E2E_KUBE_APISERVER"],
		KubeControllerManager: paths["EFS_E2E_KUBE_CONTROLLER_MANAGER"],
		CSIProvisioner:        paths["EFS_E2E_CSI_PROVISIONER"],
		Helm:                  paths["EFS_E2E_HELM"],
		Kubeconform:           paths["EFS_E2E_KUBECONFORM"],
		CSISnapshotter:        paths["EFS_E2E_CSI_SNAPSHOTTER"],
		SnapshotController:    paths["EFS_E2E_SNAPSHOT_CONTROLLER"],
		SnapshotCRDs:          paths["EFS_E2E_SNAPSHOT_CRDS"],
	}
	var missing []string
	for _, p := range []string{c.Etcd, c.KubeAPIServer, c.KubeControllerManager, c.CSIProvisioner, c.Helm, c.CSISnapshotter, c.SnapshotController} {
		if st, err := os.Stat(p); p == "" || err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("%w: %s", ErrComponentsMissing, strings.Join(missing, ", "))
	}
	return c, nil
}

// Cluster is a running etcd + kube-apiserver + kube-controller-manager on loopback.
type Cluster struct {
	Dir        string // working directory: data, certificates, logs
	Server     string // https://127.0.0.1:PORT
	Kubeconfig string // admin kubeconfig (system:masters)
	Config     *rest.Config
	Client     kubernetes.Interface

	pki                  *pki
	etcd, apiserver, kcm *Process
}

// Timings of the bring-up, for the report.
type Timings struct {
	Etcd, APIServer, Total time.Duration
}

// Start brings a control plane up in dir. The controller manager runs only the
// persistent-volume binder and the PV/PVC protection controllers: without the binder no
// PVC gets the storage-provisioner annotation that csi-provisioner waits for.
func Start(ctx context.Context, comps Components, dir string) (c *Cluster, tm Timings, err error) {
	start := time.Now()
	c = &Cluster{Dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.pki, err = newPKI(dir); err != nil {
		return nil, tm, err
	}

	clientPort, err := FreePort()
	if err != nil {
		return nil, tm, err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, tm, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.etcd, err = StartProcess("etcd", dir, comps.Etcd, nil,
		"--name=e2e",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		// A test cluster need not survive power loss; fsync costs seconds per run.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return nil, tm, err
	}
	if err = c.etcd.WaitReady(ctx, httpOK(http.DefaultClient, etcdURL+"/health", "")); err != nil {
		return nil, tm, err
	}
	tm.Etcd = time.Since(start)

	token, err := randomToken()
	if err != nil {
		return nil, tm, err
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err = os.WriteFile(tokenFile, []byte(token+",admin,uid-admin,system:masters\n"), 0o600); err != nil {
		return nil, tm, err
	}
	apiPort, err := FreePort()
	if err != nil {
		return nil, tm, err
	}
	c.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	apiStart := time.Now()
	c.apiserver, err = StartProcess("kube-apiserver", dir, comps.KubeAPIServer, nil,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file="+c.pki.ServingCert, "--tls-private-key-file="+c.pki.ServingKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki.SAPub,
		"--service-account-signing-key-file="+c.pki.SAKey,
		"--service-cluster-ip-range=10.96.0.0/12",
		"--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		// The chart's node plugin is privileged; the API server refuses such pods without it.
		"--allow-privileged=true",
		// On loopback the endpoint reconciler refuses to start (no routable address).
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	)
	if err != nil {
		return nil, tm, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.CAPEM)
	apiHTTP := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err = c.apiserver.WaitReady(ctx, httpOK(apiHTTP, c.Server+"/readyz", token)); err != nil {
		return nil, tm, err
	}
	tm.APIServer = time.Since(apiStart)

	if c.Kubeconfig, err = c.WriteKubeconfig("admin", token); err != nil {
		return nil, tm, err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, tm, err
	}
	// Hundreds of objects at once: client-go's default 5 QPS would be the bottleneck.
	c.Config.QPS, c.Config.Burst = 500, 1000
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, tm, err
	}

	c.kcm, err = StartProcess("kube-controller-manager", dir, comps.KubeControllerManager, nil,
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller",
		"--kube-api-qps=300", "--kube-api-burst=600",
	)
	if err != nil {
		return nil, tm, err
	}
	tm.Total = time.Since(start)
	return c, tm, nil
}

// Alive reports an error if a control plane process has exited.
func (c *Cluster) Alive() error {
	for _, p := range []*Process{c.etcd, c.apiserver, c.kcm} {
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s: %w; log %s", p.Name, ErrExited, p.LogPath)
		default:
		}
	}
	return nil
}

// Stop stops the control plane: the API server before etcd (the other way round the API
// server hangs on its storage for many seconds).
func (c *Cluster) Stop() time.Duration {
	start := time.Now()
	for _, p := range []*Process{c.kcm, c.apiserver, c.etcd} {
		if p != nil {
			p.Stop(syscall.SIGTERM, 15*time.Second)
		}
	}
	return time.Since(start)
}

// Tail writes the end of every control plane log to w.
func (c *Cluster) Tail(w io.Writer, n int) {
	for _, p := range []*Process{c.etcd, c.apiserver, c.kcm} {
		if p != nil {
			p.Tail(w, n)
		}
	}
}

// WriteKubeconfig writes a kubeconfig for a bearer token (e.g. a service account's) and
// returns its path.
func (c *Cluster) WriteKubeconfig(user, token string) (string, error) {
	path := filepath.Join(c.Dir, user+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: %s
current-context: e2e
`, c.Server, base64.StdEncoding.EncodeToString(c.pki.CAPEM), user, token, user)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

func httpOK(client *http.Client, url, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		return nil
	}
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
