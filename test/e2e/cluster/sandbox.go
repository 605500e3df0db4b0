package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Sandbox runs one container of a rendered pod template as the kubelet and a container
// runtime would as far as the file system goes, so that a test sees what the chart's
// securityContext and volumes let the process write:
//
//   - a private mount namespace (made on a locked OS thread of this process, which
//     returns to the host's afterwards, so the host's mount table is never changed and
//     everything goes when the process exits);
//   - a root file system that is an overlay over the host's / (the "image"), its upper
//     layer in Dir, remounted read-only when readOnlyRootFilesystem is true; /proc, /sys
//     and /dev are the host's;
//   - each volumeMount: emptyDir a fresh 0777 directory; hostPath a directory under
//     Dir/host (so the host is never touched); configMap, secret, projected (service
//     account token, CA, downward API) and downwardAPI read-only directories with their
//     content; the pod's automounted service account when automountServiceAccountToken
//     is not false;
//   - the rendered runAsUser, runAsGroup, fsGroup and supplementalGroups (runAsNonRoot
//     with uid 0 is refused, as the kubelet refuses it), the rendered env with valueFrom
//     filled in, the in-cluster KUBERNETES_SERVICE_HOST/PORT, and $(VAR) in command and
//     args expanded as the kubelet does.
//
// Not modelled: capabilities beyond what a non-root uid loses, allowPrivilegeEscalation,
// seccomp, mount propagation (every mount is private: Bidirectional mounts do not reach
// Dir/host), network and PID namespaces, subPath, resource limits, and an image: the
// overlay's lower layer is the host's root, plus Binary at Entrypoint.
type Sandbox struct {
	// Dir holds everything the sandbox makes on the host: volumes, the root's layers.
	Dir       string
	Pod       corev1.PodSpec
	Container string
	// The pod's identity, for the downward API and the service account's namespace.
	PodName, Namespace, NodeName string
	// Binary is bound read-only at Entrypoint (the image's ENTRYPOINT, used when the
	// container has no command). "" binds nothing: Entrypoint is the host's file.
	Binary, Entrypoint string
	// APIServer (https://host:port) is what KUBERNETES_SERVICE_HOST/PORT name.
	APIServer string
	// Token is the pod's service account token and CACert the cluster CA
	// (kube-root-ca.crt), for projected volumes and the automounted service account.
	Token  string
	CACert []byte
	// ConfigMaps and Secrets by name (in the pod's namespace): data by key.
	ConfigMaps map[string]map[string]string
	Secrets    map[string]map[string][]byte
	// NodeMemory is the node's allocatable memory, which limits.memory resolves to in
	// a resourceFieldRef when the container has no limit.
	NodeMemory int64
	// Env is added after the container's own: what a webhook injects (credentials,
	// endpoints) and the test's affordances.
	Env []string
	// ExtraMounts are bound as they are, for the test's affordances (an emulator's data
	// directory at the path the driver is told).
	ExtraMounts []BindMount
	// Empty are directories the image holds empty: the host's content there is
	// hidden (an opaque directory in the root's upper layer). A test that removes a
	// volume from the rendering sets its mount path, so that what the host holds
	// there (another test's files) does not stand in for what the process writes.
	Empty []string

	container *corev1.Container
	sources   map[string]string // volume name: host directory
	upper     string
	before    map[string]fs.FileMode // the upper layer's entries the sandbox made
}

// BindMount is a host path bound at Target in the sandbox.
type BindMount struct {
	Source, Target string
	ReadOnly       bool
}

// ServiceAccountDir is where a pod's automounted service account appears.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// the image's PATH, as the kubelet's environment for a container starts.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// launch is everything the process needs, resolved on the host before the namespace.
type launch struct {
	argv       []string
	env        []string
	uid, gid   uint32
	groups     []uint32
	readOnly   bool
	mounts     []BindMount // sorted by target, parents first
	workingDir string
}

// Start prepares the volumes and starts the container's process, its output in
// logDir/name.log.
func (sb *Sandbox) Start(name, logDir string) (*Process, error) {
	l, err := sb.prepare()
	if err != nil {
		return nil, err
	}
	type result struct {
		p   *Process
		err error
	}
	res := make(chan result, 1)
	go func() {
		// The mount namespace is this thread's alone while it is locked. It must live
		// as long as the process, whose Pdeathsig fires when the thread that started it
		// ends; and it must not end afterwards either: it may be the thread that started
		// other processes (the control plane), which would be killed with it. So it
		// returns to the host's namespace and to the pool; if it cannot, it stays
		// locked and Go ends it.
		runtime.LockOSThread()
		// setns moves the thread's working directory to the namespace's root: the
		// process's relative paths resolve from cwd again afterwards.
		host, err := os.Open("/proc/thread-self/ns/mnt")
		var cwd *os.File
		if err == nil {
			defer host.Close()
			cwd, err = os.Open(".")
		}
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{nil, fmt.Errorf("sandbox: %w", err)}
			return
		}
		defer cwd.Close()
		p, err := sb.spawn(name, logDir, l)
		res <- result{p, err}
		if err == nil {
			<-p.Done()
		}
		if unix.Setns(int(host.Fd()), unix.CLONE_NEWNS) == nil && unix.Fchdir(int(cwd.Fd())) == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-res
	return r.p, r.err
}

func (sb *Sandbox) spawn(name, logDir string, l launch) (*Process, error) {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("sandbox: unshare: %w", err)
	}
	merged, err := sb.mountRoot(l)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(l.argv[0], l.argv[1:]...)
	cmd.Env = l.env
	cmd.Dir = l.workingDir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     merged,
		Credential: &syscall.Credential{Uid: l.uid, Gid: l.gid, Groups: l.groups},
		Pdeathsig:  syscall.SIGKILL,
	}
	return startCmd(name, logDir, cmd)
}

// mountRoot builds the root in this thread's (new) mount namespace and returns it.
func (sb *Sandbox) mountRoot(l launch) (string, error) {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("sandbox: make mounts private: %w", err)
	}
	root := filepath.Join(sb.Dir, "root")
	merged, work := filepath.Join(root, "merged"), filepath.Join(root, "work")
	sb.upper = filepath.Join(root, "upper")
	for _, d := range []string{merged, work, sb.upper} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if strings.ContainsAny(root, ",:") {
		return "", fmt.Errorf("sandbox: %s: overlay options cannot hold ',' or ':'", root)
	}
	for _, p := range sb.Empty {
		d := filepath.Join(sb.upper, filepath.Clean("/"+p))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
		if err := unix.Setxattr(d, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			return "", fmt.Errorf("sandbox: empty %s: %w", p, err)
		}
	}
	if err := syscall.Mount("overlay", merged, "overlay", 0,
		"lowerdir=/,upperdir="+sb.upper+",workdir="+work); err != nil {
		return "", fmt.Errorf("sandbox: overlay root: %w", err)
	}
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if err := syscall.Mount(d, merged+d, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return "", fmt.Errorf("sandbox: %s: %w", d, err)
		}
	}
	for _, m := range l.mounts {
		if err := bind(m, merged); err != nil {
			return "", err
		}
	}
	// What the sandbox made in the upper layer (mount points) is not the process's.
	before, err := walkUpper(sb.upper)
	if err != nil {
		return "", err
	}
	sb.before = before
	if l.readOnly {
		if err := syscall.Mount("", merged, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return "", fmt.Errorf("sandbox: read-only root: %w", err)
		}
	}
	return merged, nil
}

// bind mounts m.Source at m.Target under root, making the mount point (a file for a
// file) in the root's upper layer.
func bind(m BindMount, root string) error {
	target, err := resolveIn(root, m.Target)
	if err != nil {
		return fmt.Errorf("sandbox: mount point %s: %w", m.Target, err)
	}
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("sandbox: %s: %w", m.Target, err)
	}
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
			f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("sandbox: mount point %s: %w", m.Target, err)
	}
	if err := syscall.Mount(m.Source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("sandbox: bind %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("sandbox: read-only %s: %w", m.Target, err)
		}
	}
	return nil
}

// resolveIn returns where path of the container is under root, its symlinks followed
// as the container sees them (an absolute one from root): /var/run -> /run must not
// lead a mount point out to the host's /run.
func resolveIn(root, path string) (string, error) {
	rest := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			cur = next // missing (made later) or not a link
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: too many symlinks", path)
		}
		dest, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(dest) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(dest, "/"), "/"), rest...)
	}
	return filepath.Join(root, cur), nil
}

// RootWrite is one entry the process created, replaced or removed in its root file
// system (not in a volume): a path in the container.
type RootWrite struct {
	Path    string
	Mode    fs.FileMode
	Removed bool // a whiteout: the path was removed
}

func (w RootWrite) String() string {
	if w.Removed {
		return w.Path + " (removed)"
	}
	switch {
	case w.Mode.IsDir():
		return w.Path + " (directory)"
	case w.Mode&fs.ModeSymlink != 0:
		return w.Path + " (symlink)"
	case w.Mode.IsRegular():
		return w.Path + " (file)"
	}
	return w.Path + " (" + w.Mode.Type().String() + ")"
}

// RootWrites lists what the process wrote to its root file system, sorted: on a
// read-only root nothing; on a writable one, what a container restart loses.
func (sb *Sandbox) RootWrites() ([]RootWrite, error) {
	if sb.upper == "" {
		return nil, errors.New("sandbox: not started")
	}
	after, err := walkUpper(sb.upper)
	if err != nil {
		return nil, err
	}
	var out []RootWrite
	for p, mode := range after {
		if _, ok := sb.before[p]; !ok {
			// A whiteout is a 0/0 character device.
			out = append(out, RootWrite{Path: p, Mode: mode, Removed: mode&fs.ModeCharDevice != 0})
		}
	}
	slices.SortFunc(out, func(a, b RootWrite) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// walkUpper returns the entries of an overlay's upper layer by container path.
func walkUpper(upper string) (map[string]fs.FileMode, error) {
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == upper {
			return err
		}
		out["/"+strings.TrimPrefix(p, upper+"/")] = d.Type()
		return nil
	})
	return out, err
}

// HostPath returns where path of the container is on the host: in the volume mounted
// at the longest prefix of it. ok is false for a path on the root file system.
func (sb *Sandbox) HostPath(path string) (string, bool) {
	c := sb.container
	if c == nil {
		return "", false
	}
	best, host := "", ""
	for _, vm := range c.VolumeMounts {
		mp := filepath.Clean(vm.MountPath)
		if (path == mp || strings.HasPrefix(path, mp+"/") || mp == "/") && len(mp) > len(best) {
			if src, ok := sb.sources[vm.Name]; ok {
				best, host = mp, filepath.Join(src, strings.TrimPrefix(path, mp))
			}
		}
	}
	return host, best != ""
}

// prepare finds the container, makes its volumes' host directories and content and
// resolves its identity, environment and command line.
func (sb *Sandbox) prepare() (launch, error) {
	var l launch
	i := slices.IndexFunc(sb.Pod.Containers, func(c corev1.Container) bool { return c.Name == sb.Container })
	if i < 0 {
		return l, fmt.Errorf("sandbox: the pod has no container %q", sb.Container)
	}
	c := &sb.Pod.Containers[i]
	sb.container = c
	psc := sb.Pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	// The container's settings win over the pod's; unset, the image's user (root).
	uid := cmp.Or(csc.RunAsUser, psc.RunAsUser)
	if uid != nil {
		l.uid = uint32(*uid)
	}
	if gid := cmp.Or(csc.RunAsGroup, psc.RunAsGroup); gid != nil {
		l.gid = uint32(*gid)
	}
	if nonRoot := cmp.Or(csc.RunAsNonRoot, psc.RunAsNonRoot); nonRoot != nil && *nonRoot && l.uid == 0 {
		return l, fmt.Errorf("sandbox: container %s has runAsNonRoot and would run as root", c.Name)
	}
	var fsGroup *int64
	if psc.FSGroup != nil {
		fsGroup = psc.FSGroup
		l.groups = append(l.groups, uint32(*psc.FSGroup))
	}
	for _, g := range psc.SupplementalGroups {
		l.groups = append(l.groups, uint32(g))
	}
	l.readOnly = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	l.workingDir = cmp.Or(c.WorkingDir, "/")

	env, err := sb.environment(c)
	if err != nil {
		return l, err
	}
	for _, e := range sb.Env {
		env = setEnv(env, e)
	}
	l.env = env
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	command := c.Command
	if len(command) == 0 {
		if sb.Entrypoint == "" {
			return l, fmt.Errorf("sandbox: container %s has no command and the sandbox no Entrypoint", c.Name)
		}
		command = []string{sb.Entrypoint}
	}
	for _, a := range append(slices.Clone(command), c.Args...) {
		l.argv = append(l.argv, ExpandVars(a, vars))
	}
	if sb.Binary != "" {
		l.mounts = append(l.mounts, BindMount{Source: sb.Binary, Target: sb.Entrypoint, ReadOnly: true})
	}

	sb.sources = map[string]string{}
	volumes := map[string]corev1.Volume{}
	for _, v := range sb.Pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := slices.Clone(c.VolumeMounts)
	if automount := sb.Pod.AutomountServiceAccountToken; (automount == nil || *automount) &&
		!slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == ServiceAccountDir }) {
		// What the kubelet adds to every container of a pod that automounts its token.
		const name = "kube-api-access-sandbox"
		volumes[name] = corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}}
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: ServiceAccountDir, ReadOnly: true})
		c.VolumeMounts = mounts
	}
	for _, vm := range mounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return l, fmt.Errorf("sandbox: volumeMount %s: subPath is not modelled", vm.Name)
		}
		v, ok := volumes[vm.Name]
		if !ok {
			return l, fmt.Errorf("sandbox: volumeMount %s names no volume of the pod", vm.Name)
		}
		src, readOnly, err := sb.volume(v, fsGroup)
		if err != nil {
			return l, fmt.Errorf("sandbox: volume %s: %w", v.Name, err)
		}
		sb.sources[vm.Name] = src
		l.mounts = append(l.mounts, BindMount{Source: src, Target: vm.MountPath, ReadOnly: readOnly || vm.ReadOnly})
	}
	l.mounts = append(l.mounts, sb.ExtraMounts...)
	// Parents before children, as runtimes order mounts.
	slices.SortStableFunc(l.mounts, func(a, b BindMount) int {
		return cmp.Compare(strings.Count(filepath.Clean(a.Target), "/"), strings.Count(filepath.Clean(b.Target), "/"))
	})
	return l, nil
}

// volume makes v's host directory and returns it, and whether it is always mounted
// read-only (the kubelet's content volumes are).
func (sb *Sandbox) volume(v corev1.Volume, fsGroup *int64) (string, bool, error) {
	src := filepath.Join(sb.Dir, "volumes", v.Name)
	vs := v.VolumeSource
	switch {
	case vs.HostPath != nil:
		// The host's path, moved under Dir: a test never touches the real one.
		dir := filepath.Join(sb.Dir, "host", vs.HostPath.Path)
		t := corev1.HostPathUnset
		if vs.HostPath.Type != nil {
			t = *vs.HostPath.Type
		}
		switch t {
		case corev1.HostPathFileOrCreate, corev1.HostPathFile:
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				return "", false, err
			}
			f, err := os.OpenFile(dir, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return "", false, err
			}
			return dir, false, f.Close()
		}
		return dir, false, os.MkdirAll(dir, 0o755)
	case vs.EmptyDir != nil:
		// The kubelet makes emptyDir world-writable; fsGroup owns it (setgid).
		if err := os.MkdirAll(src, 0o777); err != nil {
			return "", false, err
		}
		return src, false, applyFSGroup(src, 0o777, fsGroup)
	case vs.Projected != nil, vs.ConfigMap != nil, vs.Secret != nil, vs.DownwardAPI != nil:
		files, mode, err := sb.content(vs)
		if err != nil {
			return "", false, err
		}
		if err := os.MkdirAll(src, 0o755); err != nil {
			return "", false, err
		}
		for name, data := range files {
			p := filepath.Join(src, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", false, err
			}
			if err := os.WriteFile(p, data, mode); err != nil {
				return "", false, err
			}
			if err := applyFSGroup(p, mode, fsGroup); err != nil {
				return "", false, err
			}
		}
		return src, true, applyFSGroup(src, 0o755, fsGroup)
	}
	return "", false, errors.New("volume type not modelled")
}

// applyFSGroup gives path to group fsGroup as the kubelet does (group-readable, and a
// directory setgid so that new files join the group).
func applyFSGroup(path string, mode fs.FileMode, fsGroup *int64) error {
	if fsGroup == nil {
		return os.Chmod(path, mode)
	}
	if err := os.Chown(path, -1, int(*fsGroup)); err != nil {
		return err
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		mode |= fs.ModeSetgid
	}
	return os.Chmod(path, mode|0o040)
}

// content returns the files of a configMap, secret, downwardAPI or projected volume and
// their mode.
func (sb *Sandbox) content(vs corev1.VolumeSource) (map[string][]byte, fs.FileMode, error) {
	files := map[string][]byte{}
	mode := fs.FileMode(0o644)
	setMode := func(m *int32) {
		if m != nil {
			mode = fs.FileMode(*m)
		}
	}
	addKeys := func(data map[string][]byte, items []corev1.KeyToPath) error {
		if len(items) == 0 {
			for k, v := range data {
				files[k] = v
			}
			return nil
		}
		for _, it := range items {
			v, ok := data[it.Key]
			if !ok {
				return fmt.Errorf("no key %q", it.Key)
			}
			files[it.Path] = v
		}
		return nil
	}
	downward := func(items []corev1.DownwardAPIVolumeFile) error {
		for _, it := range items {
			if it.FieldRef == nil {
				return fmt.Errorf("downwardAPI %s: only fieldRef is modelled", it.Path)
			}
			v, err := sb.field(it.FieldRef.FieldPath)
			if err != nil {
				return err
			}
			files[it.Path] = []byte(v)
		}
		return nil
	}
	switch {
	case vs.ConfigMap != nil:
		setMode(vs.ConfigMap.DefaultMode)
		return files, mode, addKeys(sb.configMap(vs.ConfigMap.Name), vs.ConfigMap.Items)
	case vs.Secret != nil:
		setMode(vs.Secret.DefaultMode)
		return files, mode, addKeys(sb.Secrets[vs.Secret.SecretName], vs.Secret.Items)
	case vs.DownwardAPI != nil:
		setMode(vs.DownwardAPI.DefaultMode)
		return files, mode, downward(vs.DownwardAPI.Items)
	}
	setMode(vs.Projected.DefaultMode)
	for _, src := range vs.Projected.Sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			if sb.Token == "" {
				err = errors.New("a serviceAccountToken projection and no Token")
			}
			files[src.ServiceAccountToken.Path] = []byte(sb.Token)
		case src.ConfigMap != nil:
			err = addKeys(sb.configMap(src.ConfigMap.Name), src.ConfigMap.Items)
		case src.Secret != nil:
			err = addKeys(sb.Secrets[src.Secret.Name], src.Secret.Items)
		case src.DownwardAPI != nil:
			err = downward(src.DownwardAPI.Items)
		default:
			err = errors.New("projection not modelled")
		}
		if err != nil {
			return nil, 0, err
		}
	}
	return files, mode, nil
}

// configMap returns a ConfigMap's data; kube-root-ca.crt, which the API server puts in
// every namespace, holds CACert.
func (sb *Sandbox) configMap(name string) map[string][]byte {
	out := map[string][]byte{}
	if name == "kube-root-ca.crt" && sb.CACert != nil {
		out["ca.crt"] = sb.CACert
	}
	for k, v := range sb.ConfigMaps[name] {
		out[k] = []byte(v)
	}
	return out
}

// field answers a downward API fieldPath.
func (sb *Sandbox) field(path string) (string, error) {
	switch path {
	case "metadata.name":
		return sb.PodName, nil
	case "metadata.namespace":
		return sb.Namespace, nil
	case "spec.nodeName":
		return sb.NodeName, nil
	case "spec.serviceAccountName":
		return sb.Pod.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("downward API field %q not modelled", path)
}

// environment is the container's environment as the kubelet builds it: the image's
// PATH, HOSTNAME, the service's variables, then env in order, each value's $(VAR)
// expanded from the ones before.
func (sb *Sandbox) environment(c *corev1.Container) ([]string, error) {
	env := []string{"PATH=" + imagePath, "HOSTNAME=" + sb.PodName}
	if sb.APIServer != "" {
		u, err := url.Parse(sb.APIServer)
		if err != nil {
			return nil, err
		}
		env = append(env, "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
	}
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	for _, ef := range c.EnvFrom {
		var data map[string][]byte
		switch {
		case ef.ConfigMapRef != nil:
			data = sb.configMap(ef.ConfigMapRef.Name)
		case ef.SecretRef != nil:
			data = sb.Secrets[ef.SecretRef.Name]
		}
		for k, v := range data {
			env = setEnv(env, ef.Prefix+k+"="+string(v))
			vars[ef.Prefix+k] = string(v)
		}
	}
	for _, e := range c.Env {
		v := ExpandVars(e.Value, vars)
		if vf := e.ValueFrom; vf != nil {
			var err error
			switch {
			case vf.FieldRef != nil:
				v, err = sb.field(vf.FieldRef.FieldPath)
			case vf.ResourceFieldRef != nil:
				v, err = sb.resourceField(c, vf.ResourceFieldRef)
			case vf.ConfigMapKeyRef != nil:
				b, ok := sb.configMap(vf.ConfigMapKeyRef.Name)[vf.ConfigMapKeyRef.Key]
				if !ok && (vf.ConfigMapKeyRef.Optional == nil || !*vf.ConfigMapKeyRef.Optional) {
					err = fmt.Errorf("env %s: no key %s in ConfigMap %s", e.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Name)
				}
				if !ok {
					continue
				}
				v = string(b)
			case vf.SecretKeyRef != nil:
				b, ok := sb.Secrets[vf.SecretKeyRef.Name][vf.SecretKeyRef.Key]
				if !ok && (vf.SecretKeyRef.Optional == nil || !*vf.SecretKeyRef.Optional) {
					err = fmt.Errorf("env %s: no key %s in Secret %s", e.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Name)
				}
				if !ok {
					continue
				}
				v = string(b)
			default:
				err = fmt.Errorf("env %s: valueFrom not modelled", e.Name)
			}
			if err != nil {
				return nil, err
			}
		}
		env = setEnv(env, e.Name+"="+v)
		vars[e.Name] = v
	}
	return env, nil
}

// resourceField answers a resourceFieldRef: the container's limit or request, a limit
// it lacks being the node's allocatable (memory: NodeMemory; CPU: the host's cores).
func (sb *Sandbox) resourceField(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		return "", fmt.Errorf("resourceFieldRef of container %s not modelled", ref.ContainerName)
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		switch name {
		case "memory":
			q = *resource.NewQuantity(sb.NodeMemory, resource.BinarySI)
		case "cpu":
			q = *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI)
		default:
			return "", fmt.Errorf("resourceFieldRef %s not modelled", ref.Resource)
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	// As the kubelet rounds: up to a whole number of divisors.
	n := (q.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()
	return strconv.FormatInt(n, 10), nil
}

// setEnv sets kv (KEY=value) in env, replacing an earlier KEY.
func setEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
	return append(env, kv)
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// ExpandVars expands $(VAR) from vars as the kubelet does in env values, command and
// args: an unknown reference stays as written, and $$ is a literal $.
func ExpandVars(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}
