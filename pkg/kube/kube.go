// Package kube is the driver's access to the Kubernetes API, through
// client-go: the few reads the orphan collector needs (PersistentVolumes,
// claims, StorageClasses), the cluster's identity (the kube-system
// namespace's UID), a Lease to elect the one replica that collects, and a
// node's zone label; and the journal's stores in the release namespace:
// Leases (leasejournal.go), and the ConfigMaps of earlier releases
// (journal.go).
package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1api "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	storagev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// In-cluster defaults, as every pod sees them.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Config locates the API server. Empty fields take the in-cluster defaults.
type Config struct {
	URL       string // https://host:port
	TokenFile string
	CAFile    string
	// The journal's client-side rate (SetJournalRate); 0: the default.
	JournalQPS   float32
	JournalBurst int
}

// Configured reports whether there is an API server to talk to: a URL was
// given, or the process runs in a pod.
func (c Config) Configured() bool {
	return c.URL != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// PodNamespace is the namespace of the pod the process runs in, from its
// service account, or "" outside a pod.
func PodNamespace() string {
	b, err := os.ReadFile(serviceAccountDir + "/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Client reads the cluster. Safe for concurrent use.
type Client struct {
	core    corev1.CoreV1Interface
	storage storagev1.StorageV1Interface
	leases  coordinationv1.CoordinationV1Interface
	// journalConfig is the configuration of the journal's clients: no
	// timeout (the journal's calls come with every CreateVolume and
	// DeleteVolume and are bounded by their caller's context, or by the
	// Lease store's own) and a rate limiter of their own
	// (SetJournalRate), so that a burst of provisioning neither waits
	// behind the collector's lists and the election's renewals nor delays
	// them; the API server's priority and fairness bounds the rest.
	journalConfig *rest.Config
	rateMu        sync.Mutex
	qps           float32
	burst         int
	log           *slog.Logger // SetLogger
}

// SetLogger sets where the record's stores made from now on log damage to
// the record (a Lease deleted or rewritten by hand); default
// slog.Default().
func (c *Client) SetLogger(l *slog.Logger) {
	c.rateMu.Lock()
	defer c.rateMu.Unlock()
	c.log = l
}

func (c *Client) logger() *slog.Logger {
	c.rateMu.Lock()
	defer c.rateMu.Unlock()
	if c.log == nil {
		return slog.Default()
	}
	return c.log
}

// SetJournalRate sets the client-side rate of the journal's stores made
// from now on (--journal-kube-api-qps, --journal-kube-api-burst); 0 keeps
// the default (DefaultJournalQPS, DefaultJournalBurst).
func (c *Client) SetJournalRate(qps float32, burst int) {
	c.rateMu.Lock()
	defer c.rateMu.Unlock()
	c.qps, c.burst = qps, burst
}

// New validates cfg, filling in-cluster defaults. It makes no call.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("kube: no API server URL and not running in a cluster")
		}
		cfg.URL = "https://" + net.JoinHostPort(host, port)
	}
	if cfg.TokenFile == "" {
		cfg.TokenFile = serviceAccountDir + "/token"
	}
	if cfg.CAFile == "" {
		cfg.CAFile = serviceAccountDir + "/ca.crt"
	}
	if _, err := os.Stat(cfg.TokenFile); err != nil {
		return nil, fmt.Errorf("kube: token: %w", err)
	}
	c, err := NewForConfig(&rest.Config{
		Host: cfg.URL,
		// client-go re-reads the file: projected service account tokens rotate.
		BearerTokenFile: cfg.TokenFile,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cfg.CAFile},
	})
	if err != nil {
		return nil, err
	}
	c.SetJournalRate(cfg.JournalQPS, cfg.JournalBurst)
	return c, nil
}

// NewForConfig builds a client on rc (a kubeconfig's, LoadConfig), with
// the driver's defaults for what rc leaves unset: its user agent, a 30 s
// timeout, 5 requests/s (burst 10) and JSON. It makes no call.
func NewForConfig(rc *rest.Config) (*Client, error) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = cmp.Or(rc.UserAgent, "efs-csi-driver")
	if rc.Timeout == 0 {
		rc.Timeout = 30 * time.Second
	}
	if rc.QPS == 0 {
		// A round reads a few lists; the election renews every few seconds.
		rc.QPS, rc.Burst = 5, 10
	}
	// JSON, not client-go's protobuf default for built-in types: a few
	// small objects a minute, and the test API server decodes them.
	rc.ContentType = "application/json"
	c := &Client{}
	var err error
	if c.core, err = corev1.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if c.storage, err = storagev1.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if c.leases, err = coordinationv1.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	c.journalConfig = rest.CopyConfig(rc)
	c.journalConfig.Timeout = 0
	return c, nil
}

// LoadConfig resolves the API server and credentials as kubectl does
// (client-go's default loading rules): kubeconfig if not "", else
// $KUBECONFIG, else ~/.kube/config, else the pod's in-cluster
// configuration; context "" is the kubeconfig's current context. It
// returns the configuration and a description of where it came from.
func LoadConfig(kubeconfig, context string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kube: %w", err)
	}
	from := "in-cluster configuration"
	if raw, err := cc.RawConfig(); err == nil && len(raw.Contexts) > 0 {
		from = "kubeconfig context " + cmp.Or(context, raw.CurrentContext)
	}
	return rc, from, nil
}

// pageSize bounds one list answer, so that a large cluster is read in pages.
const pageSize = 500

// VolumeHandles returns the CSI volume handles of every PersistentVolume of
// the given driver.
func (c *Client) VolumeHandles(ctx context.Context, driver string) ([]string, error) {
	var handles []string
	err := c.PersistentVolumes(ctx, driver, func(pvs []PersistentVolume) error {
		for _, pv := range pvs {
			handles = append(handles, pv.Handle)
		}
		return nil
	})
	return handles, err
}

// PersistentVolume is what the driver reads of a CSI PersistentVolume.
type PersistentVolume struct {
	Name   string `json:"name"`
	Handle string `json:"volumeHandle"`
	// The claim the PV is bound to (or was: a Released PV keeps it).
	ClaimNamespace string `json:"claimNamespace,omitempty"`
	ClaimName      string `json:"claimName,omitempty"`
	StorageClass   string `json:"storageClass,omitempty"`
	Phase          string `json:"phase,omitempty"`
	ReclaimPolicy  string `json:"reclaimPolicy,omitempty"`
}

// PersistentVolumes calls fn with the CSI PersistentVolumes of driver, a
// page at a time (at most pageSize PVs are read at once).
func (c *Client) PersistentVolumes(ctx context.Context, driver string, fn func([]PersistentVolume) error) error {
	return list(ctx, "PersistentVolumes", c.core.PersistentVolumes().List, func(l *v1.PersistentVolumeList) (string, error) {
		var page []PersistentVolume
		for _, pv := range l.Items {
			csi := pv.Spec.CSI
			if csi == nil || csi.Driver != driver {
				continue
			}
			p := PersistentVolume{Name: pv.Name, Handle: csi.VolumeHandle, StorageClass: pv.Spec.StorageClassName,
				Phase: string(pv.Status.Phase), ReclaimPolicy: string(pv.Spec.PersistentVolumeReclaimPolicy)}
			if ref := pv.Spec.ClaimRef; ref != nil {
				p.ClaimNamespace, p.ClaimName = ref.Namespace, ref.Name
			}
			page = append(page, p)
		}
		return l.Continue, fn(page)
	})
}

// Claim is what the driver reads of a PersistentVolumeClaim.
type Claim struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	UID          string `json:"uid"`
	StorageClass string `json:"storageClass,omitempty"`
	VolumeName   string `json:"volumeName,omitempty"`
	Phase        string `json:"phase,omitempty"`
}

// Claims calls fn with every PersistentVolumeClaim of the cluster, a page
// at a time.
func (c *Client) Claims(ctx context.Context, fn func([]Claim) error) error {
	return list(ctx, "PersistentVolumeClaims", c.core.PersistentVolumeClaims("").List, func(l *v1.PersistentVolumeClaimList) (string, error) {
		page := make([]Claim, 0, len(l.Items))
		for _, pvc := range l.Items {
			cl := Claim{Namespace: pvc.Namespace, Name: pvc.Name, UID: string(pvc.UID), VolumeName: pvc.Spec.VolumeName, Phase: string(pvc.Status.Phase)}
			if sc := pvc.Spec.StorageClassName; sc != nil {
				cl.StorageClass = *sc
			}
			page = append(page, cl)
		}
		return l.Continue, fn(page)
	})
}

// list pages through a List of what, calling each with every page; each
// returns the page's continue token.
func list[L any](ctx context.Context, what string, get func(context.Context, metav1.ListOptions) (L, error), each func(L) (string, error)) error {
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		l, err := get(ctx, opts)
		if err != nil {
			return fmt.Errorf("kube: list %s: %w", what, err)
		}
		next, err := each(l)
		if err != nil || next == "" {
			return err
		}
		opts.Continue = next
	}
}

// ClaimUID returns the UID of the PersistentVolumeClaim namespace/name, or ""
// when it does not exist. Any other failure (unauthorized, unreachable) is an
// error, never taken for a missing claim.
func (c *Client) ClaimUID(ctx context.Context, namespace, name string) (string, error) {
	pvc, err := c.core.PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("kube: get claim %s/%s: %w", namespace, name, err)
	}
	return string(pvc.UID), nil
}

// provisionerSecretName and provisionerSecretNamespace are the
// StorageClass parameters naming the Secret the provisioner passes to
// CreateVolume and DeleteVolume.
const (
	provisionerSecretName      = "csi.storage.k8s.io/provisioner-secret-name"
	provisionerSecretNamespace = "csi.storage.k8s.io/provisioner-secret-namespace"
)

// StorageClass is what the driver reads of a StorageClass.
type StorageClass struct {
	Name       string            `json:"name"`
	Parameters map[string]string `json:"parameters,omitempty"`
}

// StorageClasses returns the StorageClasses whose provisioner is driver,
// in the API's order.
func (c *Client) StorageClasses(ctx context.Context, driver string) ([]StorageClass, error) {
	var out []StorageClass
	err := list(ctx, "StorageClasses", c.storage.StorageClasses().List, func(l *storagev1api.StorageClassList) (string, error) {
		for _, sc := range l.Items {
			if sc.Provisioner == driver {
				out = append(out, StorageClass{Name: sc.Name, Parameters: sc.Parameters})
			}
		}
		return l.Continue, nil
	})
	return out, err
}

// FileSystemIDs returns the distinct file systems the StorageClasses whose
// provisioner is driver name (each of a class's comma-separated
// fileSystemId list), in the API's order.
func (c *Client) FileSystemIDs(ctx context.Context, driver string) ([]string, error) {
	classes, err := c.StorageClasses(ctx, driver)
	if err != nil {
		return nil, err
	}
	var ids []string
	seen := map[string]bool{}
	for _, sc := range classes {
		for _, id := range c.classFileSystems(ctx, sc.Parameters) {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// ProvisionerSecret is the provisioner Secret a class names (the
// csi.storage.k8s.io/provisioner-secret-* parameters), if any.
func ProvisionerSecret(params map[string]string) (namespace, name string, ok bool) {
	name, ok = params[provisionerSecretName]
	return params[provisionerSecretNamespace], name, ok
}

// classFileSystems are the file systems a class names, by fileSystemId or
// by a reference it can read now; none for a class that names none, and
// none for a class whose volumes live where the controller's own EFS
// client does not reach: a class with a provisioner secret (which may name
// another account's role; only the provisioner reads it) or of S3 Files.
func (c *Client) classFileSystems(ctx context.Context, params map[string]string) []string {
	if _, ok := params[provisionerSecretName]; ok || params[volume.ParamProvisioningMode] == volume.ProvisioningModeS3FilesAccessPoint {
		return nil
	}
	ids, _ := c.ClassFileSystems(ctx, params)
	return ids
}

// ClassFileSystems are the file systems a class's parameters name: each
// entry of its fileSystemId list (a class may name several, comma-
// separated), or the value of its fileSystemIdConfigRef or
// fileSystemIdSecretRef read now; none for a class that names none (static
// provisioning). A reference that cannot be read, or holds no ID, is an
// error.
func (c *Client) ClassFileSystems(ctx context.Context, params map[string]string) ([]string, error) {
	ref, isRef, err := volume.FileSystemRef(params)
	switch {
	case err != nil:
		return nil, err
	case !isRef:
		var ids []string
		for _, id := range volume.FileSystemIDList(params[volume.ParamFileSystemID]) {
			if id != "" && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		return ids, nil
	}
	v, err := c.KeyValue(ctx, string(ref.Kind), ref.Namespace, ref.Name, ref.Key)
	if err != nil {
		return nil, err
	}
	if id, ok := volume.FileSystemIDFromRef(v); ok {
		return []string{id}, nil
	}
	return nil, fmt.Errorf("kube: %s holds no file system ID", ref)
}

// NamespaceUID returns the UID of a namespace. The UID of kube-system is the
// cluster's identity: set when the cluster is made, never reused, and
// readable with a get on one namespace.
func (c *Client) NamespaceUID(ctx context.Context, name string) (string, error) {
	ns, err := c.core.Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("kube: get namespace %s: %w", name, err)
	}
	if ns.UID == "" {
		return "", fmt.Errorf("kube: namespace %s has no UID", name)
	}
	return string(ns.UID), nil
}

// NodeLabel returns the value of label key on the Node name, "" when the
// Node has no such label. A missing Node is the API's NotFound error.
func (c *Client) NodeLabel(ctx context.Context, name, key string) (string, error) {
	n, err := c.core.Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("kube: get Node %s: %w", name, err)
	}
	return n.Labels[key], nil
}

// ErrKeyNotFound: the ConfigMap or Secret exists and has no such key.
var ErrKeyNotFound = errors.New("kube: no such key")

// KeyValue returns the value under key of the ConfigMap (kind "ConfigMap")
// or Secret (kind "Secret") namespace/name, read with one get. A missing
// object is the API's NotFound error, a missing key ErrKeyNotFound.
func (c *Client) KeyValue(ctx context.Context, kind, namespace, name, key string) (string, error) {
	var data map[string][]byte
	switch kind {
	case "ConfigMap":
		cm, err := c.core.ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("kube: get ConfigMap %s/%s: %w", namespace, name, err)
		}
		if v, ok := cm.Data[key]; ok {
			return v, nil
		}
		data = cm.BinaryData
	case "Secret":
		s, err := c.core.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("kube: get Secret %s/%s: %w", namespace, name, err)
		}
		data = s.Data
	default:
		return "", fmt.Errorf("kube: cannot read keys of a %q", kind)
	}
	v, ok := data[key]
	if !ok {
		return "", fmt.Errorf("%w: %s %s/%s has no key %q", ErrKeyNotFound, kind, namespace, name, key)
	}
	return string(v), nil
}
