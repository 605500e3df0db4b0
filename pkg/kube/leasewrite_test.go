package kube

import (
	"bytes"
	"encoding/json"
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

// An entry's header is written byte for byte as json.Marshal writes it and
// read as json.Unmarshal reads it, whatever its strings hold, and the
// plain ones (all a storm writes) are written and read by hand.
func FuzzEntryHeader(f *testing.F) {
	f.Add("volume", "fs-0123456789abcdef0", "pvc-1", false, "fsap-0123", "ab12cd34.7", false, `{"k":"volume","f":"fs-1","v":"a.1"}`)
	f.Add("id", "fs-1", "\xff<&>\"\\\u2028", true, "", "x", true, `{"k":"a","k":"b","nb":true,"K":"c"}`)
	f.Add("", "", "", false, "", "", false, `{"nb":false}`)
	f.Fuzz(func(t *testing.T, kind, fs, name string, nb bool, index, version string, vb bool, line string) {
		h := entryHeader{Kind: kind, FileSystem: fs, Name: name, NameB64: nb, Index: index, Version: version, ValueB64: vb}
		want, _ := json.Marshal(&h)
		got, ok := appendHeader(nil, &h)
		if ok != (plain(kind) && plain(fs) && plain(name) && plain(index) && plain(version)) || ok && string(got) != string(want) {
			t.Fatalf("%+v: wrote %q (%v), json.Marshal %q", h, got, ok, want)
		}
		for _, in := range []string{string(want), line} {
			var fast, slow entryHeader
			errFast := parseHeader(in, &fast)
			errSlow := json.Unmarshal([]byte(in), &slow)
			if (errFast == nil) != (errSlow == nil) || errSlow == nil && fast != slow {
				t.Fatalf("%q: read %+v (%v), json.Unmarshal %+v (%v)", in, fast, errFast, slow, errSlow)
			}
			if in == string(want) && ok && !parsePlainHeader(in, &fast) {
				t.Fatalf("%q: a plain header not read by hand", in)
			}
		}
	})
}

// A Table's resourceVersion read from its start is what the JSON reading
// of the answer finds.
func FuzzTableResourceVersion(f *testing.F) {
	f.Add([]byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"211"},"rows":[]}`))
	f.Add([]byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"2\"11"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if rv, ok := tableResourceVersion(body); ok {
			if want, err := jsonResourceVersion(body); err != nil || rv != want {
				t.Fatalf("%q: %q from its start, %q (%v) read as JSON", body, rv, want, err)
			}
		}
	})
}
