package kubetest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	configMapsResource = schema.GroupResource{Resource: "configmaps"}
	configMapKind      = schema.GroupKind{Kind: "ConfigMap"}
)

// The API server's message of a resourceVersion precondition that failed
// (k8s.io/apiserver/pkg/registry/generic/registry.OptimisticLockErrorMsg).
const optimisticLockErrorMsg = "the object has been modified; please apply your changes to the latest version and try again"

// The API server's message of a continue token older than etcd's compaction.
const continueExpiredMsg = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."

// ConfigMap returns the ConfigMap ns/name as stored now.
func (s *Server) ConfigMap(ns, name string) (corev1.ConfigMap, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cm, ok := s.configMaps[ns+"/"+name]
	if !ok {
		return corev1.ConfigMap{}, false
	}
	return *cm.DeepCopy(), true
}

// ConfigMaps returns the ConfigMaps of namespace ns as stored now, by name.
func (s *Server) ConfigMaps(ns string) []corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []corev1.ConfigMap
	for _, k := range s.configMapKeys() {
		if cm := s.configMaps[k]; cm.Namespace == ns {
			out = append(out, *cm.DeepCopy())
		}
	}
	return out
}

// SetConfigMap creates or replaces a ConfigMap as given (at a new
// resourceVersion), unchecked: an object made by hand or by someone else.
func (s *Server) SetConfigMap(cm corev1.ConfigMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := cm.DeepCopy()
	c.ResourceVersion = ""
	s.storeConfigMap(c)
}

// DeleteConfigMap deletes the ConfigMap ns/name, if any.
func (s *Server) DeleteConfigMap(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.configMaps[ns+"/"+name]; ok {
		delete(s.configMaps, ns+"/"+name)
		s.rv++
	}
}

// ExpireContinues makes every continue token issued so far too old (410
// Expired), as etcd's compaction of the revision a paged list reads does.
func (s *Server) ExpireContinues() {
	s.mu.Lock()
	s.validFrom = s.continues
	s.mu.Unlock()
}

// Writes counts the requests on resource ("configmaps", "leases"...) that
// would change it (create, update, patch, delete), answered so far.
func (s *Server) Writes(resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.Method != http.MethodGet && slices.Contains(strings.Split(r.Path, "/"), resource) {
			n++
		}
	}
	return n
}

// storeConfigMap stores cm at a new resourceVersion, giving a new one its
// UID and creation time; s.mu is held.
func (s *Server) storeConfigMap(cm *corev1.ConfigMap) {
	s.rv++
	cm.ResourceVersion = strconv.Itoa(s.rv)
	if cm.UID == "" {
		cm.UID = types.UID(fmt.Sprintf("uid-configmap-%d", s.rv))
	}
	if cm.CreationTimestamp.IsZero() {
		cm.CreationTimestamp = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	}
	s.configMaps[cm.Namespace+"/"+cm.Name] = cm
}

// configMapKeys are the keys of every ConfigMap in etcd's order; s.mu is held.
func (s *Server) configMapKeys() []string {
	keys := make([]string, 0, len(s.configMaps))
	for k := range s.configMaps {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// configMap serves the ConfigMaps of namespace ns: rest is [] (the
// collection) or [name].
func (s *Server) configMap(w http.ResponseWriter, r *http.Request, caller, ns string, rest []string) {
	name, verb := "", ""
	if len(rest) == 1 {
		name = rest[0]
	}
	switch {
	case r.Method == http.MethodGet && name == "":
		verb = "list"
	case r.Method == http.MethodGet:
		verb = "get"
	case r.Method == http.MethodPost && name == "":
		verb = "create"
	case r.Method == http.MethodPut && name != "":
		verb = "update"
	case r.Method == http.MethodDelete && name != "":
		verb = "delete"
	default:
		fail(w, apierrors.NewMethodNotSupported(configMapsResource, r.Method))
		return
	}
	if s.isForbidden("configmaps", verb) {
		fail(w, apierrors.NewForbidden(configMapsResource, name,
			fmt.Errorf("User %q cannot %s resource \"configmaps\" in API group \"\" in the namespace %q", caller, verb, ns)))
		return
	}
	switch verb {
	case "list":
		s.listConfigMaps(w, r, ns)
	case "get":
		cm := s.configMaps[ns+"/"+name]
		if cm == nil {
			fail(w, apierrors.NewNotFound(configMapsResource, name))
			return
		}
		reply(w, http.StatusOK, cm)
	case "create":
		s.createConfigMap(w, r, ns)
	case "update":
		s.updateConfigMap(w, r, ns, name)
	case "delete":
		s.deleteConfigMap(w, r, ns, name)
	}
}

// continueToken is what a continue parameter holds: which token it is (for
// ExpireContinues), the list's resourceVersion and the last key answered.
type continueToken struct {
	Seq   int    `json:"seq"`
	RV    string `json:"rv"`
	Start string `json:"start"`
}

func (s *Server) listConfigMaps(w http.ResponseWriter, r *http.Request, ns string) {
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		fail(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	var limit int
	if l := q.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 0 {
			fail(w, apierrors.NewBadRequest("invalid limit "+strconv.Quote(l)))
			return
		}
	}
	rv, start := strconv.Itoa(s.rv), ""
	if c := q.Get("continue"); c != "" {
		var tok continueToken
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err == nil {
			err = json.Unmarshal(raw, &tok)
		}
		if err != nil {
			fail(w, apierrors.NewBadRequest("continue key is not valid: "+err.Error()))
			return
		}
		if tok.Seq < s.validFrom {
			fail(w, apierrors.NewResourceExpired(continueExpiredMsg))
			return
		}
		rv, start = tok.RV, tok.Start
	}
	l := corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"}}
	l.ResourceVersion = rv
	for _, k := range s.configMapKeys() {
		cm := s.configMaps[k]
		if cm.Namespace != ns || k <= start || !sel.Matches(labels.Set(cm.Labels)) {
			continue
		}
		if limit > 0 && len(l.Items) == limit {
			tok, _ := json.Marshal(continueToken{Seq: s.continues, RV: rv, Start: ns + "/" + l.Items[len(l.Items)-1].Name})
			s.continues++
			l.Continue = base64.RawURLEncoding.EncodeToString(tok)
			break
		}
		l.Items = append(l.Items, *cm)
	}
	reply(w, http.StatusOK, &l)
}

func (s *Server) createConfigMap(w http.ResponseWriter, r *http.Request, ns string) {
	var in corev1.ConfigMap
	if !decodeBody(w, r, &in) || !sameNamespace(w, &in, ns) {
		return
	}
	if in.ResourceVersion != "" {
		// etcd3's storage.ErrResourceVersionSetOnCreate, answered as an unknown error.
		reply(w, http.StatusInternalServerError, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: "resourceVersion should not be set on objects to be created"})
		return
	}
	if s.configMaps[ns+"/"+in.Name] != nil {
		fail(w, apierrors.NewAlreadyExists(configMapsResource, in.Name))
		return
	}
	if errs := validConfigMap(&in); len(errs) > 0 {
		fail(w, apierrors.NewInvalid(configMapKind, in.Name, errs))
		return
	}
	in.UID, in.CreationTimestamp = "", metav1.Time{}
	cm := in.DeepCopy()
	s.storeConfigMap(cm)
	reply(w, http.StatusCreated, cm)
}

func (s *Server) updateConfigMap(w http.ResponseWriter, r *http.Request, ns, name string) {
	var in corev1.ConfigMap
	if !decodeBody(w, r, &in) || !sameNamespace(w, &in, ns) {
		return
	}
	if in.Name != name {
		fail(w, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", in.Name, name)))
		return
	}
	old := s.configMaps[ns+"/"+name]
	if old == nil {
		fail(w, apierrors.NewNotFound(configMapsResource, name))
		return
	}
	// ConfigMaps allow an unconditional update: no resourceVersion, no check.
	if in.ResourceVersion != "" && in.ResourceVersion != old.ResourceVersion {
		fail(w, apierrors.NewConflict(configMapsResource, name, errors.New(optimisticLockErrorMsg)))
		return
	}
	errs := validConfigMap(&in)
	if old.Immutable != nil && *old.Immutable {
		if in.Immutable == nil || !*in.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !jsonEqual(in.Data, old.Data) || !jsonEqual(in.BinaryData, old.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	if len(errs) > 0 {
		fail(w, apierrors.NewInvalid(configMapKind, name, errs))
		return
	}
	in.UID, in.CreationTimestamp, in.ResourceVersion = old.UID, old.CreationTimestamp, old.ResourceVersion
	if jsonEqual(&in, old) {
		// As etcd3's GuaranteedUpdate: nothing changed, nothing written, the
		// resourceVersion stays.
		reply(w, http.StatusOK, old)
		return
	}
	cm := in.DeepCopy()
	s.storeConfigMap(cm)
	reply(w, http.StatusOK, cm)
}

func (s *Server) deleteConfigMap(w http.ResponseWriter, r *http.Request, ns, name string) {
	var opts metav1.DeleteOptions
	if r.ContentLength != 0 && !decodeBody(w, r, &opts) {
		return
	}
	old := s.configMaps[ns+"/"+name]
	if old == nil {
		fail(w, apierrors.NewNotFound(configMapsResource, name))
		return
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != old.UID {
			fail(w, apierrors.NewConflict(configMapsResource, name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, old.UID)))
			return
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != old.ResourceVersion {
			fail(w, apierrors.NewConflict(configMapsResource, name,
				fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, old.ResourceVersion)))
			return
		}
	}
	delete(s.configMaps, ns+"/"+name)
	s.rv++ // a delete is a revision of etcd too
	reply(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
		Details: &metav1.StatusDetails{Name: name, Kind: "configmaps", UID: old.UID}})
}

// validConfigMap is the API server's validation of a ConfigMap
// (ValidateConfigMap): metadata, keys, and at most 1 MiB of data.
func validConfigMap(cm *corev1.ConfigMap) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&cm.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	total := 0
	for k, v := range cm.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
		}
		total += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, msg))
		}
		if _, dup := cm.Data[k]; dup {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, "duplicate of key present in data"))
		}
		total += len(k) + len(v)
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func decodeBody(w http.ResponseWriter, r *http.Request, into any) bool {
	if err := json.NewDecoder(r.Body).Decode(into); err != nil {
		fail(w, apierrors.NewBadRequest(err.Error()))
		return false
	}
	return true
}

func sameNamespace(w http.ResponseWriter, cm *corev1.ConfigMap, ns string) bool {
	if cm.Namespace != "" && cm.Namespace != ns {
		fail(w, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return false
	}
	cm.Namespace = ns
	return true
}

func jsonEqual(a, b any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(x, y)
}

// fail answers the Status of an API error, as the API server does.
func fail(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	reply(w, int(st.Code), &st)
}
