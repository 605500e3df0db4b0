// Package kubetest serves a small Kubernetes API over HTTPS for tests: the
// objects the driver reads (PersistentVolumes, PersistentVolumeClaims,
// StorageClasses, Namespaces, Secrets), Leases with the API server's optimistic
// concurrency (resourceVersion conflicts, AlreadyExists), ConfigMaps with
// all of it (create, get, update and delete with resourceVersion
// preconditions, lists by label selector in pages, continue tokens that
// expire: configmaps.go), lists of PersistentVolumes and claims in pages,
// and Nodes (labels, taints) with JSON patches (applied by the API server's
// own library: a failed test is 422), behind bearer tokens. It speaks the wire format of
// the real API server, so the driver's
// real client (client-go) runs against it unchanged; the e2e suite runs the
// same code against a real kube-apiserver.
package kubetest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// KubeSystemUID is the UID of the kube-system namespace the server starts with.
const KubeSystemUID = "6f1c2d3e-0000-4000-8000-00000000c1d0"

// Server is a fake API server. Safe for concurrent use.
type Server struct {
	URL    string
	CAFile string

	t   testing.TB
	srv *httptest.Server
	dir string
	// conns counts the connections clients opened, each with its TLS
	// handshake.
	conns atomic.Int64

	mu       sync.Mutex
	tokens   map[string]string // bearer token -> caller name
	ns       map[string]string // namespace -> UID
	pvs      []corev1.PersistentVolume
	claims   map[string]string // ns/name -> UID
	classes  []storagev1.StorageClass
	leases   map[string]*coordinationv1.Lease // ns/name
	nodes    map[string]*corev1.Node
	rv       int           // resourceVersion of the last change
	pvEvents []pvEvent     // every PV change, for watches
	changed  chan struct{} // closed and replaced on each PV change
	requests []Request
	hook     func(Request)
	// Secrets ("secrets", ns/name -> data), and the verbs every caller is
	// forbidden on a resource (resource -> verb, "*" for all).
	keyed     map[string]map[string]map[string][]byte
	forbidden map[string]map[string]bool
	// ConfigMaps (ns/name), the continue tokens issued (a sequence) and the
	// first one still valid, and the failure injected (Fail).
	configMaps map[string]*corev1.ConfigMap
	continues  int
	validFrom  int
	fault      func(Request) int
	// claimObjs holds the claims AddClaim made, as given (ns/name).
	claimObjs map[string]*corev1.PersistentVolumeClaim
	listPage  int // PVs and claims per list answer; 0: pvPage
}

type pvEvent struct {
	rv   int
	kind string // ADDED, DELETED
	pv   corev1.PersistentVolume
}

// Request is one request the server answered, by caller (token name).
type Request struct {
	Caller, Method, Path string
	Query                string // the raw query: labelSelector, limit, continue...
	Watch                bool   // ?watch=true
	Bytes                int64  // the body's length as sent (Content-Length; -1: unknown)
	Accept               string // the Accept header: the forms of answer asked for
	Proto                string // HTTP/1.1 or HTTP/2.0
	Answered             int64  // the answer's body bytes (0 for a watch or an injected fault)
	At                   time.Time
}

// Start serves until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), tokens: map[string]string{},
		ns: map[string]string{"kube-system": KubeSystemUID}, claims: map[string]string{},
		leases: map[string]*coordinationv1.Lease{}, nodes: map[string]*corev1.Node{}, changed: make(chan struct{}),
		configMaps: map[string]*corev1.ConfigMap{}}
	// HTTP/2, as kube-apiserver serves and client-go speaks it: every
	// request of a client on one connection.
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.EnableHTTP2 = true
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.StartTLS()
	t.Cleanup(func() {
		s.srv.CloseClientConnections() // watches stream until their client goes
		s.srv.Close()
	})
	s.URL = s.srv.URL
	s.CAFile = filepath.Join(s.dir, "ca.crt")
	if err := os.WriteFile(s.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// TokenFile issues a token for caller and returns the file holding it.
func (s *Server) TokenFile(caller string) string {
	s.t.Helper()
	tok := "token-" + caller
	s.mu.Lock()
	s.tokens[tok] = caller
	s.mu.Unlock()
	f := filepath.Join(s.dir, caller+".token")
	if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return f
}

// OnRequest sets a function called before each authenticated request is
// served (nil: none), to interleave changes with a client's reads.
func (s *Server) OnRequest(f func(Request)) {
	s.mu.Lock()
	s.hook = f
	s.mu.Unlock()
}

// Requests returns what the server answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Connections returns how many connections clients opened so far.
func (s *Server) Connections() int64 { return s.conns.Load() }

// Count returns how many requests of method the server answered so far.
func (s *Server) Count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.Method == method {
			n++
		}
	}
	return n
}

// AddPV adds a CSI PersistentVolume of driver with the given handle.
func (s *Server) AddPV(name, driver, handle string) {
	s.AddPVObject(corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}},
	})
}

// AddPVObject adds pv as given (a claimRef, a class, a phase...), with a
// resourceVersion and, when it has none, a UID.
func (s *Server) AddPVObject(pv corev1.PersistentVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pv.UID == "" {
		pv.UID = types.UID("uid-" + pv.Name)
	}
	s.pvChanged("ADDED", &pv)
	s.pvs = append(s.pvs, pv)
}

// pvChanged records a PV change for watches; s.mu is held.
func (s *Server) pvChanged(kind string, pv *corev1.PersistentVolume) {
	s.rv++
	pv.ResourceVersion = strconv.Itoa(s.rv)
	ev := pvEvent{s.rv, kind, *pv}
	ev.pv.TypeMeta = metav1.TypeMeta{Kind: "PersistentVolume", APIVersion: "v1"} // watch events carry it
	s.pvEvents = append(s.pvEvents, ev)
	close(s.changed)
	s.changed = make(chan struct{})
}

// DeletePV removes the PersistentVolume name.
func (s *Server) DeletePV(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pvs = slices.DeleteFunc(s.pvs, func(pv corev1.PersistentVolume) bool {
		if pv.Name == name {
			s.pvChanged("DELETED", &pv)
		}
		return pv.Name == name
	})
}

// SetClaim creates (uid != "") or deletes (uid == "") the claim ns/name.
func (s *Server) SetClaim(ns, name, uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if uid == "" {
		delete(s.claims, ns+"/"+name)
		delete(s.claimObjs, ns+"/"+name)
	} else {
		s.claims[ns+"/"+name] = uid
	}
}

// AddClaim creates or replaces the claim pvc (its namespace and name; a
// UID when it has none), listed and read as given.
func (s *Server) AddClaim(pvc corev1.PersistentVolumeClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pvc.UID == "" {
		pvc.UID = types.UID("uid-" + pvc.Namespace + "-" + pvc.Name)
	}
	if s.claimObjs == nil {
		s.claimObjs = map[string]*corev1.PersistentVolumeClaim{}
	}
	key := pvc.Namespace + "/" + pvc.Name
	s.claims[key], s.claimObjs[key] = string(pvc.UID), &pvc
}

// claim is the claim key (ns/name) as the API serves it; s.mu is held.
func (s *Server) claim(key string) corev1.PersistentVolumeClaim {
	if c := s.claimObjs[key]; c != nil {
		return *c.DeepCopy()
	}
	ns, name, _ := strings.Cut(key, "/")
	return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(s.claims[key])}}
}

// AddStorageClass adds a StorageClass.
func (s *Server) AddStorageClass(name, provisioner string, params map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.classes = append(s.classes, storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Provisioner: provisioner, Parameters: params})
}

// SetNodeLabels creates or replaces the Node name with labels.
func (s *Server) SetNodeLabels(name string, labels map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	s.nodes[name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
		ResourceVersion: strconv.Itoa(s.rv), Labels: labels}}
}

// SetObject creates or replaces the ConfigMap (resource "configmaps") or
// Secret ("secrets") ns/name with data.
func (s *Server) SetObject(resource, ns, name string, data map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resource == "configmaps" {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: maps.Clone(data)}
		if old := s.configMaps[ns+"/"+name]; old != nil {
			cm.UID, cm.CreationTimestamp = old.UID, old.CreationTimestamp
		}
		s.storeConfigMap(cm)
		return
	}
	if s.keyed == nil {
		s.keyed = map[string]map[string]map[string][]byte{}
	}
	if s.keyed[resource] == nil {
		s.keyed[resource] = map[string]map[string][]byte{}
	}
	d := map[string][]byte{}
	for k, v := range data {
		d[k] = []byte(v)
	}
	s.keyed[resource][ns+"/"+name] = d
}

// Forbid answers every request of resource ("configmaps", "secrets") with
// 403, as RBAC does without a grant; with verbs ("get", "list", "create",
// "update", "delete"), the requests of those verbs only.
func (s *Server) Forbid(resource string, verbs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forbidden == nil {
		s.forbidden = map[string]map[string]bool{}
	}
	if s.forbidden[resource] == nil {
		s.forbidden[resource] = map[string]bool{}
	}
	if len(verbs) == 0 {
		verbs = []string{"*"}
	}
	for _, v := range verbs {
		s.forbidden[resource][v] = true
	}
}

// isForbidden reports whether verb on resource is forbidden; s.mu is held.
func (s *Server) isForbidden(resource, verb string) bool {
	return s.forbidden[resource]["*"] || s.forbidden[resource][verb]
}

// Fail sets a function called with each authenticated request (nil: none):
// a non-zero answer is the HTTP status the request gets instead of being
// served (500, 503, 429...), with the body the API server sends for it.
// Nothing is applied.
func (s *Server) Fail(f func(Request) int) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// LeaseHolder returns the holder identity of the Lease ns/name, or "".
func (s *Server) LeaseHolder(ns, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.leases[ns+"/"+name]; l != nil && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
}

// SetNode creates or replaces the Node name with these taints.
func (s *Server) SetNode(name string, taints ...corev1.Taint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	s.nodes[name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
		ResourceVersion: strconv.Itoa(s.rv)}, Spec: corev1.NodeSpec{Taints: taints}}
}

// Node returns the Node name as stored now.
func (s *Server) Node(name string) (corev1.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return corev1.Node{}, false
	}
	return *n.DeepCopy(), true
}

// pvPage is how many PVs (and claims) one list answer holds at most by
// default, so that paging is exercised.
const pvPage = 2

// SetListPage makes list answers of PVs and claims hold at most n items
// (the client's limit applies too), for tests of many objects.
func (s *Server) SetListPage(n int) {
	s.mu.Lock()
	s.listPage = n
	s.mu.Unlock()
}

// page is the items a list answer holds at most for r; s.mu is held.
func (s *Server) page(r *http.Request) int {
	n := cmp.Or(s.listPage, pvPage)
	if l, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && l > 0 {
		n = min(n, l)
	}
	return n
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	caller, ok := s.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	hook := s.hook
	s.mu.Unlock()
	if !ok {
		status(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	req := Request{Caller: caller, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Watch: r.URL.Query().Get("watch") == "true",
		Bytes: r.ContentLength, Accept: r.Header.Get("Accept"), Proto: r.Proto, At: time.Now()}
	if hook != nil {
		hook(req) // without the lock: the hook may change objects
	}
	s.mu.Lock()
	fault := s.fault
	s.mu.Unlock()
	if fault != nil {
		if code := fault(req); code != 0 {
			s.mu.Lock()
			s.requests = append(s.requests, req)
			s.mu.Unlock()
			fail(w, apierrors.NewGenericServerResponse(code, r.Method, schema.GroupResource{}, "", "injected by kubetest", 0, false))
			return
		}
	}
	if r.URL.Path == "/api/v1/persistentvolumes" && req.Watch {
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		s.watchPVs(w, r)
		return
	}
	// The body is read before the lock. Over HTTP/2 a client's requests
	// share one connection's flow-control window: a handler that read its
	// body under the lock, while the bodies of requests waiting for it
	// filled that window, would wait for data that cannot come until the
	// client gave up (kube-apiserver takes no lock of the whole server).
	if r.Body != nil {
		buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0), 4<<20)+bytes.MinRead))
		_, err := buf.ReadFrom(r.Body)
		b := buf.Bytes()
		if err != nil {
			fail(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		r.Body = readBody{bytes.NewReader(b), b}
	}
	cw := &countingWriter{ResponseWriter: w}
	w = cw
	s.mu.Lock()
	defer s.mu.Unlock()
	at := len(s.requests)
	s.requests = append(s.requests, req)
	defer func() { s.requests[at].Answered = cw.n }() // before the unlock
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	get := r.Method == http.MethodGet
	switch p := parts; {
	case get && r.URL.Path == "/api/v1/persistentvolumes":
		start, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		end := min(start+s.page(r), len(s.pvs))
		l := corev1.PersistentVolumeList{Items: s.pvs[min(start, end):end]}
		l.ResourceVersion = strconv.Itoa(s.rv)
		if end < len(s.pvs) {
			l.Continue = strconv.Itoa(end)
		}
		reply(w, http.StatusOK, &l)
	case get && r.URL.Path == "/api/v1/persistentvolumeclaims":
		keys := slices.Sorted(maps.Keys(s.claims))
		start, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		end := min(start+s.page(r), len(keys))
		l := corev1.PersistentVolumeClaimList{}
		for _, k := range keys[min(start, end):end] {
			l.Items = append(l.Items, s.claim(k))
		}
		l.ResourceVersion = strconv.Itoa(s.rv)
		if end < len(keys) {
			l.Continue = strconv.Itoa(end)
		}
		reply(w, http.StatusOK, &l)
	case get && r.URL.Path == "/apis/storage.k8s.io/v1/storageclasses":
		reply(w, http.StatusOK, &storagev1.StorageClassList{Items: s.classes})
	case get && len(p) == 4 && p[0] == "api" && p[2] == "namespaces":
		uid, ok := s.ns[p[3]]
		if !ok {
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "namespace not found")
			return
		}
		reply(w, http.StatusOK, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p[3], UID: types.UID(uid)}})
	case get && len(p) == 6 && p[0] == "api" && p[4] == "persistentvolumeclaims":
		if _, ok := s.claims[p[3]+"/"+p[5]]; !ok {
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "claim not found")
			return
		}
		pvc := s.claim(p[3] + "/" + p[5])
		reply(w, http.StatusOK, &pvc)
	case len(p) >= 5 && len(p) <= 6 && p[0] == "api" && p[1] == "v1" && p[2] == "namespaces" && p[4] == "configmaps":
		s.configMap(w, r, caller, p[3], p[5:])
	case get && len(p) == 6 && p[0] == "api" && p[4] == "secrets":
		s.keyedObject(w, p[4], p[3], p[5])
	case len(p) == 4 && p[0] == "api" && p[2] == "nodes":
		s.node(w, r, p[3])
	case len(p) >= 6 && strings.Join(p[:3], "/") == "apis/coordination.k8s.io/v1" && p[5] == "leases":
		s.lease(w, r, caller, p[4], p[6:])
	default:
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no route "+r.Method+" "+r.URL.Path)
	}
}

// watchPVs streams the PV changes after the requested resourceVersion until
// the client goes away, as the API server's watch does.
func (s *Server) watchPVs(w http.ResponseWriter, r *http.Request) {
	from, err := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
	if err != nil {
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "resourceVersion is required")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	for {
		s.mu.Lock()
		var next []pvEvent
		for _, ev := range s.pvEvents {
			if ev.rv > from {
				next = append(next, ev)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		for _, ev := range next {
			raw, _ := json.Marshal(&ev.pv)
			if enc.Encode(&metav1.WatchEvent{Type: ev.kind, Object: runtime.RawExtension{Raw: raw}}) != nil {
				return
			}
			from = ev.rv
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// node serves get and JSON patch of a Node, as the API server applies them.
func (s *Server) node(w http.ResponseWriter, r *http.Request, name string) {
	n := s.nodes[name]
	if n == nil {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "node not found")
		return
	}
	switch {
	case r.Method == http.MethodGet:
		reply(w, http.StatusOK, n)
	case r.Method == http.MethodPatch && r.Header.Get("Content-Type") == string(types.JSONPatchType):
		var body bytes.Buffer
		if _, err := body.ReadFrom(r.Body); err != nil {
			status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		patch, err := jsonpatch.DecodePatch(body.Bytes())
		if err != nil {
			status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		cur, _ := json.Marshal(n)
		out, err := patch.Apply(cur)
		if err != nil {
			status(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
			return
		}
		var next corev1.Node
		if err := json.Unmarshal(out, &next); err != nil {
			status(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
			return
		}
		s.rv++
		next.ResourceVersion = strconv.Itoa(s.rv)
		s.nodes[name] = &next
		reply(w, http.StatusOK, &next)
	default:
		status(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" "+r.Header.Get("Content-Type"))
	}
}

func (s *Server) store(key, ns string, l *coordinationv1.Lease) {
	s.rv++
	l.Namespace, l.ResourceVersion = ns, strconv.Itoa(s.rv)
	s.leases[key] = l
}

func reply(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	reply(w, code, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: fmt.Sprint(msg)})
}

func (s *Server) keyedObject(w http.ResponseWriter, resource, ns, name string) {
	if s.isForbidden(resource, "get") {
		status(w, http.StatusForbidden, metav1.StatusReasonForbidden, resource+" is forbidden")
		return
	}
	d, ok := s.keyed[resource][ns+"/"+name]
	if !ok {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, resource+" not found")
		return
	}
	reply(w, http.StatusOK, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: d})
}

// readBody is a request's body as serve read it: bodyOf takes the bytes
// without copying them again.
type readBody struct {
	*bytes.Reader
	b []byte
}

func (readBody) Close() error { return nil }

// bodyOf is r's body, whole.
func bodyOf(r *http.Request) ([]byte, error) {
	if rb, ok := r.Body.(readBody); ok {
		return rb.b, nil
	}
	return io.ReadAll(r.Body)
}

// countingWriter counts the bytes of an answer's body.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}
