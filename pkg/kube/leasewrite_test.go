package kube

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	coordinationv1api "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// A shard's annotation written from kept fragments is byte for byte what
// json.Marshal of its entries writes, through a run of writes that add,
// change and drop entries (values with what JSON escapes: quotes, HTML
// characters, line separators, bytes that are not UTF-8), and every
// fragment's length is what the entry adds to the annotation.
func TestShardFragmentsWriteWhatJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	odd := []string{`"q"`, "<a&b>", "\u2028\u2029", "\xff\xfe", "line\nbreak", `\back`, "tab\t", "é", ""}
	sh := &leaseShard{}
	entries := map[string]string{}
	for w := range 300 {
		for range 1 + rng.IntN(6) {
			k := fmt.Sprintf("%032x", rng.IntN(80))
			switch rng.IntN(3) {
			case 0:
				delete(entries, k)
			default:
				entries[k] = fmt.Sprintf(`{"k":"volume","v":"%d"}`, w) + "\n" + odd[rng.IntN(len(odd))] + fmt.Sprint(rng.IntN(1000))
			}
		}
		got, want := map[string]string{}, map[string]string{}
		sh.setEntries(got, entries)
		setEntries(want, entries)
		if got[annotationEntries] != want[annotationEntries] {
			t.Fatalf("write %d: fragments wrote\n%q\njson.Marshal\n%q", w, got[annotationEntries], want[annotationEntries])
		}
		size := 1
		for k, v := range entries {
			size += len(sh.fragment(k, v)) + 1
		}
		if len(entries) > 0 && size != len(want[annotationEntries]) {
			t.Fatalf("write %d: fragments add up to %d bytes, the annotation is %d", w, size, len(want[annotationEntries]))
		}
		if len(sh.frags) != len(entries) {
			t.Fatalf("write %d: %d fragments kept for %d entries", w, len(sh.frags), len(entries))
		}
	}
}

// A write's body is what client-go sends for the Lease (protobuf, with
// its apiVersion and kind), and encoding it leaves the Lease as it was.
func TestWriteBodyIsTheClientsEncoding(t *testing.T) {
	l := &coordinationv1api.Lease{ObjectMeta: metav1.ObjectMeta{Name: "efs-csi-journal-0-3-1", Namespace: "kube-system",
		ResourceVersion: "42", Labels: map[string]string{LabelJournalOwner: "efs.csi.aws.com"},
		Annotations: map[string]string{annotationEntries: `{"a":"b\n<c>"}`, annotationLeaseSeq: "7"}}}
	want, err := runtime.Encode(scheme.Codecs.EncoderForVersion(leaseSerializer, coordinationv1api.SchemeGroupVersion), l.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	before := l.DeepCopy()
	for range 2 { // the second from the allocator the first grew
		var a runtime.Allocator
		var body oneWrite
		if err := leaseSerializer.EncodeWithAllocator(withKind(l), &body, &a); err != nil {
			t.Fatal(err)
		}
		l.TypeMeta = metav1.TypeMeta{}
		if !bytes.Equal(body.b, want) {
			t.Fatalf("body\n%q\nclient-go's\n%q", body.b, want)
		}
	}
	if !equality.Semantic.DeepEqual(l, before) {
		t.Errorf("the Lease changed: %+v", l)
	}
}

func withKind(l *coordinationv1api.Lease) *coordinationv1api.Lease {
	l.TypeMeta = metav1.TypeMeta{APIVersion: coordinationv1api.SchemeGroupVersion.String(), Kind: "Lease"}
	return l
}
