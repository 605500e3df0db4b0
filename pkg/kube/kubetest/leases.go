package kubetest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	leaseKind      = schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}
)

// Lease returns the Lease ns/name as stored now.
func (s *Server) Lease(ns, name string) (coordinationv1.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[ns+"/"+name]
	if l == nil {
		return coordinationv1.Lease{}, false
	}
	return *l.DeepCopy(), true
}

// Leases returns the Leases of ns, by name.
func (s *Server) Leases(ns string) []coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []coordinationv1.Lease
	for _, k := range slices.Sorted(maps.Keys(s.leases)) {
		if l := s.leases[k]; l.Namespace == ns {
			out = append(out, *l.DeepCopy())
		}
	}
	return out
}

// SetLease stores l (at a new resourceVersion), as another client would.
func (s *Server) SetLease(l coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store(l.Namespace+"/"+l.Name, l.Namespace, l.DeepCopy())
}

// DeleteLease deletes the Lease ns/name, as another client would.
func (s *Server) DeleteLease(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, ns+"/"+name)
	s.rv++
}

// lease serves the Leases of ns as the API server does: get, list (label
// selector, pages), create, update and delete with resourceVersion
// preconditions, metadata validation (annotations at most 256 KiB), RBAC
// refusals (Forbid "leases").
func (s *Server) lease(w http.ResponseWriter, r *http.Request, caller, ns string, rest []string) {
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
		fail(w, apierrors.NewMethodNotSupported(leasesResource, r.Method))
		return
	}
	if s.isForbidden("leases", verb) {
		fail(w, apierrors.NewForbidden(leasesResource, name,
			fmt.Errorf("User %q cannot %s resource \"leases\" in API group \"coordination.k8s.io\" in the namespace %q", caller, verb, ns)))
		return
	}
	key := ns + "/" + name
	switch verb {
	case "get":
		l := s.leases[key]
		if l == nil {
			fail(w, apierrors.NewNotFound(leasesResource, name))
			return
		}
		replyLease(w, r, http.StatusOK, l)
	case "list":
		s.listLeases(w, r, ns)
	case "create":
		var in coordinationv1.Lease
		if !decodeLease(w, r, &in) {
			return
		}
		if in.Namespace != "" && in.Namespace != ns {
			fail(w, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
			return
		}
		in.Namespace = ns
		if in.ResourceVersion != "" {
			reply(w, http.StatusInternalServerError, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: "resourceVersion should not be set on objects to be created"})
			return
		}
		if s.leases[ns+"/"+in.Name] != nil {
			fail(w, apierrors.NewAlreadyExists(leasesResource, in.Name))
			return
		}
		if errs := validLease(&in); len(errs) > 0 {
			fail(w, apierrors.NewInvalid(leaseKind, in.Name, errs))
			return
		}
		in.CreationTimestamp = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
		s.store(ns+"/"+in.Name, ns, &in)
		in.UID = types.UID("uid-lease-" + in.ResourceVersion)
		replyLease(w, r, http.StatusCreated, &in)
	case "update":
		var in coordinationv1.Lease
		if !decodeLease(w, r, &in) {
			return
		}
		in.Namespace = ns
		if in.Name != name {
			fail(w, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", in.Name, name)))
			return
		}
		old := s.leases[key]
		if old == nil {
			fail(w, apierrors.NewNotFound(leasesResource, name))
			return
		}
		if in.ResourceVersion != "" && in.ResourceVersion != old.ResourceVersion {
			fail(w, apierrors.NewConflict(leasesResource, name, errors.New(optimisticLockErrorMsg)))
			return
		}
		if errs := validLease(&in); len(errs) > 0 {
			fail(w, apierrors.NewInvalid(leaseKind, name, errs))
			return
		}
		in.UID, in.CreationTimestamp, in.ResourceVersion = old.UID, old.CreationTimestamp, old.ResourceVersion
		if equality.Semantic.DeepEqual(&in, old) {
			replyLease(w, r, http.StatusOK, old) // nothing changed: etcd is not written, the resourceVersion stays
			return
		}
		s.store(key, ns, &in)
		replyLease(w, r, http.StatusOK, &in)
	case "delete":
		var opts metav1.DeleteOptions
		if r.ContentLength != 0 && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/vnd.kubernetes.protobuf") && !decodeBody(w, r, &opts) {
			return
		}
		old := s.leases[key]
		if old == nil {
			fail(w, apierrors.NewNotFound(leasesResource, name))
			return
		}
		if p := opts.Preconditions; p != nil && p.ResourceVersion != nil && *p.ResourceVersion != old.ResourceVersion {
			fail(w, apierrors.NewConflict(leasesResource, name,
				fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, old.ResourceVersion)))
			return
		}
		delete(s.leases, key)
		s.rv++
		reply(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
	}
}

// decodeLease decodes a Lease sent as JSON or, as client-go sends it with
// ContentType protobuf, in the API server's protobuf envelope.
func decodeLease(w http.ResponseWriter, r *http.Request, into *coordinationv1.Lease) bool {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/vnd.kubernetes.protobuf") {
		return decodeBody(w, r, into)
	}
	body, err := bodyOf(r)
	if err == nil {
		_, _, err = leaseProtobuf.Decode(body, nil, into)
	}
	if err != nil {
		fail(w, apierrors.NewBadRequest(err.Error()))
		return false
	}
	return true
}

// replyLease answers l as the API server does, in the first form the
// Accept header names that it serves: a Table (JSON, meta.k8s.io/v1),
// protobuf, or JSON (also when it names none). Another transform (a Table
// in protobuf, which the API server does not serve either) is passed over.
func replyLease(w http.ResponseWriter, r *http.Request, code int, l *coordinationv1.Lease) {
	for clause := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		media, params, err := mime.ParseMediaType(strings.TrimSpace(clause))
		switch {
		case err != nil:
		case params["as"] == "Table" && params["g"] == "meta.k8s.io" && params["v"] == "v1" && media == runtime.ContentTypeJSON:
			reply(w, code, leaseTable(r, l))
			return
		case params["as"] != "":
		case media == runtime.ContentTypeProtobuf:
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			w.WriteHeader(code)
			_ = leaseProtobuf.Encode(typedLease(l), w)
			return
		case media == runtime.ContentTypeJSON:
			reply(w, code, l)
			return
		}
	}
	reply(w, code, l)
}

// leaseTable is l as kubectl's Table of Leases (name, holder, age), its
// resourceVersion the Table's: with ?includeObject=None the row holds no
// object, with Object the Lease, else (Metadata, the default) its
// metadata, as the API server answers.
func leaseTable(r *http.Request, l *coordinationv1.Lease) *metav1.Table {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	row := metav1.TableRow{Cells: []any{l.Name, holder, time.Since(l.CreationTimestamp.Time).Truncate(time.Second).String()}}
	switch r.URL.Query().Get("includeObject") {
	case string(metav1.IncludeNone):
	case string(metav1.IncludeObject):
		row.Object.Object = typedLease(l)
	default:
		row.Object.Object = &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: l.ObjectMeta}
	}
	return &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ListMeta: metav1.ListMeta{ResourceVersion: l.ResourceVersion},
		ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name"},
			{Name: "Holder", Type: "string"}, {Name: "Age", Type: "date"}},
		Rows: []metav1.TableRow{row}}
}

// typedLease is a copy of l with its apiVersion and kind, as an answer
// carries them.
func typedLease(l *coordinationv1.Lease) *coordinationv1.Lease {
	typed := *l
	typed.TypeMeta = metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"}
	return &typed
}

var leaseProtobuf = func() *protobuf.Serializer {
	sc := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(sc); err != nil {
		panic(err)
	}
	return protobuf.NewSerializer(sc, sc)
}()

// validLease is the API server's validation of a Lease's metadata: a name,
// labels, annotations of at most 256 KiB in all.
func validLease(l *coordinationv1.Lease) field.ErrorList {
	return apivalidation.ValidateObjectMeta(&l.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, ns string) {
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		fail(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
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
	l := coordinationv1.LeaseList{TypeMeta: metav1.TypeMeta{Kind: "LeaseList", APIVersion: "coordination.k8s.io/v1"}}
	l.ResourceVersion = rv
	for _, k := range slices.Sorted(maps.Keys(s.leases)) {
		lease := s.leases[k]
		if lease.Namespace != ns || k <= start || !sel.Matches(labels.Set(lease.Labels)) {
			continue
		}
		if limit > 0 && len(l.Items) == limit {
			tok, _ := json.Marshal(continueToken{Seq: s.continues, RV: rv, Start: ns + "/" + l.Items[len(l.Items)-1].Name})
			s.continues++
			l.Continue = base64.RawURLEncoding.EncodeToString(tok)
			break
		}
		l.Items = append(l.Items, *lease)
	}
	reply(w, http.StatusOK, &l)
}
