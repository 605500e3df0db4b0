package kube

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Labels of a journal ConfigMap: what List selects by.
const (
	LabelJournalOwner = "efs.csi.aws.com/journal-owner"
	LabelJournalKind  = "efs.csi.aws.com/journal-kind"
	LabelJournalFS    = "efs.csi.aws.com/journal-fs"
	LabelJournalIndex = "efs.csi.aws.com/journal-index"
	// annotationJournalWrite changes on every write: the API server keeps
	// the resourceVersion of an update that changes nothing, and the
	// contract says a version changes on every write.
	annotationJournalWrite = "efs.csi.aws.com/journal-write"
)

// Data keys of a journal ConfigMap. A string that is not UTF-8 (a client
// token may be any bytes) is kept under the same key in binaryData.
const (
	keyOwner      = "owner"
	keyKind       = "kind"
	keyFileSystem = "fileSystem"
	keyName       = "name"
	keyValue      = "value"
)

// journalPrefix starts the name of every journal ConfigMap.
const journalPrefix = "efs-csi-journal-"

// maxCreateRaces bounds the Creates of one key that find an entry which is
// deleted before it can be read.
const maxCreateRaces = 8

// maxListRestarts bounds the Lists started again after their continue token
// expired.
const maxListRestarts = 3

// JournalStore is the journal's store in the ConfigMaps of namespace (the
// release's), shared by every replica of the controller: one ConfigMap an
// entry, named efs-csi-journal-<kind>-<the first 40 hex digits of
// sha256(owner NUL file system NUL name)>, with the labels List selects by
// (LabelJournal*: owner, kind, file system, index) and the key and value in
// its data. Versions are resourceVersions: Update and Delete are the API
// server's compare-and-swap, Get and List its linearizable reads (etcd's
// quorum reads, never the watch cache). owner (the driver's name) keeps
// apart the journals of two drivers sharing a namespace.
//
// Every error that is not an answer of the API server, and every answer
// that says it could not serve (5xx, 429, timeouts), wraps
// journal.ErrUnavailable; any other (forbidden, unauthorized, invalid) is
// definitive and says what is missing. No call has a timeout of its own:
// the caller's context bounds it.
//
// A FileSystem, an Index and a Kind must be valid label values (EFS IDs
// are; Kind also a DNS label): an entry with another one, or an empty
// FileSystem, is refused with a definitive error.
func (c *Client) JournalStore(namespace, owner string) journal.Store {
	return &configMapStore{cms: c.journalCore().ConfigMaps(namespace), ns: namespace,
		owner: owner, ownerLabel: labelValueOf(owner), page: pageSize}
}

// JournalForbidden reports whether the API server forbids this client to
// list the journal's ConfigMaps in namespace, as RBAC does without a grant
// (upstream's chart and manifests grant none): forbidden with the API
// server's answer as err. Any other failure is (false, err): the answer is
// unknown.
func (c *Client) JournalForbidden(ctx context.Context, namespace string) (bool, error) {
	_, err := c.journalCore().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelJournalOwner, Limit: 1})
	return apierrors.IsForbidden(err), err
}

// configMapStore is JournalStore's store.
type configMapStore struct {
	cms        typedcorev1.ConfigMapInterface
	ns, owner  string
	ownerLabel string
	page       int64
}

// PageSize is the most entries one call of List's fn gets
// (journaltest.Pager).
func (s *configMapStore) PageSize() int { return int(s.page) }

// labelValueOf is owner when it is a valid label value (a driver name such
// as efs.csi.aws.com is); else its valid characters with a hash of it, so
// that two owners do not share a label value.
func labelValueOf(owner string) string {
	if len(content.IsLabelValue(owner)) == 0 {
		return owner
	}
	sum := sha256.Sum256([]byte(owner))
	clean := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '-' || r == '_' || r == '.' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return r
		}
		return '-'
	}, owner)
	clean = strings.Trim(clean[:min(len(clean), 54)], "-_.")
	if clean == "" {
		clean = "owner"
	}
	return clean + "-" + hex.EncodeToString(sum[:4])
}

// objectName is the ConfigMap of key k, after checking that k can be stored.
func (s *configMapStore) objectName(k journal.Key) (string, error) {
	if s.ns == "" {
		return "", errors.New("kube: journal: no namespace for the journal's ConfigMaps")
	}
	if msgs := validation.IsDNS1123Label(string(k.Kind)); len(msgs) > 0 {
		return "", fmt.Errorf("kube: journal: kind %q: %s", k.Kind, strings.Join(msgs, "; "))
	}
	if k.FileSystem == "" {
		return "", errors.New("kube: journal: an entry needs a file system")
	}
	if err := labelValue("file system", k.FileSystem); err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(s.owner))
	h.Write([]byte{0})
	h.Write([]byte(k.FileSystem))
	h.Write([]byte{0})
	h.Write([]byte(k.Name))
	return journalPrefix + string(k.Kind) + "-" + hex.EncodeToString(h.Sum(nil))[:40], nil
}

func labelValue(what, v string) error {
	if msgs := content.IsLabelValue(v); len(msgs) > 0 {
		return fmt.Errorf("kube: journal: %s %q is not a label value: %s", what, v, strings.Join(msgs, "; "))
	}
	return nil
}

// object is the ConfigMap of e (without a resourceVersion).
func (s *configMapStore) object(e journal.Entry) (*corev1.ConfigMap, error) {
	name, err := s.objectName(e.Key)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns,
		Labels: map[string]string{LabelJournalOwner: s.ownerLabel, LabelJournalKind: string(e.Key.Kind), LabelJournalFS: e.Key.FileSystem},
		// A write that changes nothing else still changes the object, so
		// that the API server gives it a new resourceVersion.
		Annotations: map[string]string{annotationJournalWrite: rand.Text()}}}
	if e.Index != "" {
		if err := labelValue("index", e.Index); err != nil {
			return nil, err
		}
		cm.Labels[LabelJournalIndex] = e.Index
	}
	put(cm, keyOwner, s.owner)
	put(cm, keyKind, string(e.Key.Kind))
	put(cm, keyFileSystem, e.Key.FileSystem)
	put(cm, keyName, e.Key.Name)
	put(cm, keyValue, string(e.Value))
	return cm, nil
}

// put stores v under key: in data if it is UTF-8 (JSON strings are, or are
// mangled), else in binaryData.
func put(cm *corev1.ConfigMap, key, v string) {
	if utf8.ValidString(v) {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = v
		return
	}
	if cm.BinaryData == nil {
		cm.BinaryData = map[string][]byte{}
	}
	cm.BinaryData[key] = []byte(v)
}

func dataOf(cm *corev1.ConfigMap, key string) (string, bool) {
	if v, ok := cm.Data[key]; ok {
		return v, true
	}
	b, ok := cm.BinaryData[key]
	return string(b), ok
}

// entry decodes cm: an error if it is not an entry of this store's owner
// stored under the name of its own key.
func (s *configMapStore) entry(cm *corev1.ConfigMap) (journal.Entry, error) {
	var v [5]string
	for i, key := range []string{keyOwner, keyKind, keyFileSystem, keyName, keyValue} {
		var ok bool
		if v[i], ok = dataOf(cm, key); !ok {
			return journal.Entry{}, fmt.Errorf("kube: journal: ConfigMap %s/%s has no %q: not a journal entry", s.ns, cm.Name, key)
		}
	}
	if v[0] != s.owner {
		return journal.Entry{}, fmt.Errorf("kube: journal: ConfigMap %s/%s is an entry of %q, not %q", s.ns, cm.Name, v[0], s.owner)
	}
	e := journal.Entry{Key: journal.Key{Kind: journal.Kind(v[1]), FileSystem: v[2], Name: v[3]}, Value: []byte(v[4]),
		Index: cm.Labels[LabelJournalIndex], Version: cm.ResourceVersion}
	if name, err := s.objectName(e.Key); err != nil || name != cm.Name {
		return journal.Entry{}, fmt.Errorf("kube: journal: ConfigMap %s/%s holds %s, whose ConfigMap is %q", s.ns, cm.Name, e.Key, name)
	}
	return e, nil
}

// collision is the error of ConfigMap name holding another key than k: a
// hash collision (or an object made by hand).
func (s *configMapStore) collision(k journal.Key, name string, err error) error {
	return fmt.Errorf("kube: journal: %s: ConfigMap %s/%s holds another entry (a hash collision?): %w", k, s.ns, name, err)
}

func (s *configMapStore) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	name, err := s.objectName(k)
	if err != nil {
		return journal.Entry{}, err
	}
	cm, err := s.cms.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return journal.Entry{}, fmt.Errorf("%w: %s", journal.ErrNotFound, k)
	}
	if err != nil {
		return journal.Entry{}, s.failed("get", name, err)
	}
	e, err := s.keyed(k, cm)
	if err != nil {
		return journal.Entry{}, fmt.Errorf("%w: %w", journal.ErrNotFound, err)
	}
	return e, nil
}

// keyed decodes cm, the ConfigMap of key k.
func (s *configMapStore) keyed(k journal.Key, cm *corev1.ConfigMap) (journal.Entry, error) {
	e, err := s.entry(cm)
	if err == nil && e.Key != k {
		err = fmt.Errorf("it holds %s", e.Key)
	}
	if err != nil {
		return journal.Entry{}, s.collision(k, cm.Name, err)
	}
	return e, nil
}

func (s *configMapStore) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	cm, err := s.object(e)
	if err != nil {
		return journal.Entry{}, err
	}
	for range maxCreateRaces {
		made, err := s.cms.Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			return s.keyed(e.Key, made)
		}
		if !apierrors.IsAlreadyExists(err) {
			return journal.Entry{}, s.failed("create", cm.Name, err)
		}
		found, err := s.cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // deleted since: the key is free again
		}
		if err != nil {
			return journal.Entry{}, s.failed("get", cm.Name, err)
		}
		got, err := s.keyed(e.Key, found)
		if err != nil {
			return journal.Entry{}, err
		}
		return got, fmt.Errorf("%w: %s", journal.ErrExists, e.Key)
	}
	return journal.Entry{}, fmt.Errorf("%w: %s: created and deleted by others %d times over", journal.ErrUnavailable, e.Key, maxCreateRaces)
}

func (s *configMapStore) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	cm, err := s.object(e)
	if err != nil {
		return journal.Entry{}, err
	}
	if e.Version == "" {
		// The API server updates a ConfigMap without a resourceVersion
		// unconditionally: never send one.
		if _, err := s.Get(ctx, e.Key); err != nil {
			return journal.Entry{}, err
		}
		return journal.Entry{}, fmt.Errorf("%w: %s: an update without a version", journal.ErrConflict, e.Key)
	}
	cm.ResourceVersion = e.Version
	got, err := s.cms.Update(ctx, cm, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return journal.Entry{}, fmt.Errorf("%w: %s: %w", journal.ErrConflict, e.Key, err)
	case apierrors.IsNotFound(err):
		return journal.Entry{}, fmt.Errorf("%w: %s", journal.ErrNotFound, e.Key)
	case err != nil:
		return journal.Entry{}, s.failed("update", cm.Name, err)
	}
	return s.keyed(e.Key, got)
}

func (s *configMapStore) Delete(ctx context.Context, e journal.Entry) error {
	name, err := s.objectName(e.Key)
	if err != nil {
		return err
	}
	// A precondition of "" never holds for an object that exists: a
	// Delete without a version is a conflict, as the contract says.
	err = s.cms.Delete(ctx, name, metav1.DeleteOptions{Preconditions: metav1.NewRVDeletionPrecondition(e.Version).Preconditions})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %s: %w", journal.ErrConflict, e.Key, err)
	}
	return s.failed("delete", name, err)
}

func (s *configMapStore) List(ctx context.Context, kind journal.Kind, fs, index string, fn func([]journal.Entry) error) error {
	if s.ns == "" {
		return errors.New("kube: journal: no namespace for the journal's ConfigMaps")
	}
	if msgs := validation.IsDNS1123Label(string(kind)); len(msgs) > 0 {
		return fmt.Errorf("kube: journal: kind %q: %s", kind, strings.Join(msgs, "; "))
	}
	set := labels.Set{LabelJournalOwner: s.ownerLabel, LabelJournalKind: string(kind)}
	for _, f := range []struct{ label, what, v string }{{LabelJournalFS, "file system", fs}, {LabelJournalIndex, "index", index}} {
		if f.v == "" {
			continue
		}
		if err := labelValue(f.what, f.v); err != nil {
			return err
		}
		set[f.label] = f.v
	}
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromValidatedSet(set).String(), Limit: s.page}
	// The ConfigMaps answered: a List started again after its continue
	// token expired answers each entry once still.
	seen := map[string]bool{}
	restarts := 0
	for {
		l, err := s.cms.List(ctx, opts)
		if listExpired(err, &opts, &restarts) {
			continue
		}
		if err != nil {
			return s.failed("list", "", err)
		}
		page := make([]journal.Entry, 0, len(l.Items))
		for i := range l.Items {
			cm := &l.Items[i]
			if seen[cm.Name] {
				continue
			}
			e, err := s.entry(cm)
			if err != nil || e.Key.Kind != kind || fs != "" && e.Key.FileSystem != fs || index != "" && e.Index != index {
				continue // not an entry of this store: nothing to act on
			}
			seen[cm.Name] = true
			page = append(page, e)
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if l.Continue == "" {
			return nil
		}
		opts.Continue = l.Continue
	}
}

// failed is the error of a call (verb on ConfigMap name, "" for the
// collection) the API server did not serve.
func (s *configMapStore) failed(verb, name string, err error) error {
	what := fmt.Sprintf("kube: journal: %s ConfigMap %s/%s", verb, s.ns, name)
	if name == "" {
		what = fmt.Sprintf("kube: journal: %s ConfigMaps in %s", verb, s.ns)
	}
	switch {
	case unavailable(err):
		return fmt.Errorf("%w: %s: %w", journal.ErrUnavailable, what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: the controller's service account may not %s configmaps in namespace %s: grant the RBAC verb %q on configmaps there (the chart's Role efs-csi-controller-journal): %w",
			what, verb, s.ns, verb, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the API server did not accept the controller's credentials (it needs %q on configmaps in namespace %s): %w", what, verb, s.ns, err)
	case apierrors.IsInvalid(err):
		return fmt.Errorf("%s: the API server refused the entry: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// unavailable reports whether err leaves the outcome of a call unknown: the
// API server did not answer (a transport error, the context's end, the
// client's rate limiter), or answered that it could not serve.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	switch code := st.Status().Code; {
	case code >= 500, code == http.StatusTooManyRequests, code == http.StatusRequestTimeout:
		return true
	}
	switch st.Status().Reason {
	case metav1.StatusReasonServerTimeout, metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests,
		metav1.StatusReasonInternalError, metav1.StatusReasonServiceUnavailable:
		return true
	}
	return false
}

// listExpired reports whether a paged List must start over because its
// continue token expired, while it has restarts left; it counts one and
// clears the token.
func listExpired(err error, opts *metav1.ListOptions, restarts *int) bool {
	if err == nil || opts.Continue == "" || !(apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) || *restarts >= maxListRestarts {
		return false
	}
	*restarts++
	opts.Continue = ""
	return true
}
