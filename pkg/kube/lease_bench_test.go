package kube_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// BenchmarkLeaseRecordPairs drives the record in Leases (the store and the
// journal over it, as the controller uses them) through kubetest's API
// server in this process: each op is one volume's life as a create and a
// delete write it (Begin, Hold, SetAccessPoint, MarkDeleting, Finish: six
// record operations), from 100 goroutines, over a record that already
// holds 200 volumes (shards near their split size, as in a storm).
// The client-side rate is lifted: ns/op is CPU (both ends' on
// 2 cores), not the rate flag's bound. Profile the record with -cpuprofile / -memprofile and
// -focus='kube\.\(\*leaseStore\)'; the API server's share is kubetest's.
//
// Sub-benchmarks: "apart" begins and holds in two writes (Begin, HoldID),
// "held" in one (BeginHeld, the id chosen where Journal.Near says its
// entry is kept with the record, as a create's sequence tries first).
func BenchmarkLeaseRecordPairs(b *testing.B) {
	for _, held := range []bool{false, true} {
		b.Run(map[bool]string{false: "apart", true: "held"}[held], func(b *testing.B) { benchmarkLeaseRecordPairs(b, held) })
	}
}

func benchmarkLeaseRecordPairs(b *testing.B, held bool) {
	k := kubetest.Start(b)
	c, err := kube.New(kube.Config{URL: k.URL, TokenFile: k.TokenFile("controller"), CAFile: k.CAFile})
	if err != nil {
		b.Fatal(err)
	}
	// No client-side rate: what a pair costs in CPU, not what the
	// limiter (--journal-kube-api-qps) lets through.
	c.SetJournalRate(1e6, 1e6)
	j := journal.New(c.LeaseJournalStore(journalNS, driver))
	var n atomic.Int64
	life := func(name string) error {
		i := n.Add(1)
		id := 100000 + i*256 // room for the search below, as a volume's sequence searches
		if near := j.Near(fs1, name); held && near != nil {
			for !near(id) {
				id++
			}
		}
		v := journal.Volume{FileSystem: fs1, Token: name, Name: name, Path: "/stress/" + name, UID: id, GID: id, Allocated: id}
		var r *journal.Record
		var together bool
		var err error
		if held {
			r, _, together, err = j.BeginHeld(b.Context(), v)
		} else {
			r, _, err = j.Begin(b.Context(), v)
		}
		if err != nil {
			return err
		}
		if !together {
			if err := j.HoldID(b.Context(), r); err != nil {
				return err
			}
		}
		ap := journal.Made{ID: fmt.Sprintf("fsap-%017x", i), Path: v.Path, UID: v.UID, GID: v.GID, Allocated: v.Allocated}
		if err := j.SetAccessPoint(b.Context(), r, ap, false); err != nil {
			return err
		}
		if err := j.MarkDeleting(b.Context(), r); err != nil {
			return err
		}
		return j.Finish(b.Context(), r)
	}
	for i := range 200 {
		v := journal.Volume{FileSystem: fs1, Token: fmt.Sprintf("pvc-kept-%d", i), Name: fmt.Sprintf("pvc-kept-%d", i),
			Path: "/stress/kept", UID: 60000 + int64(i), GID: 60000 + int64(i), Allocated: 60000 + int64(i)}
		r, _, err := j.Begin(b.Context(), v)
		if err == nil {
			err = j.HoldID(b.Context(), r)
		}
		if err == nil {
			err = j.SetAccessPoint(b.Context(), r, journal.Made{ID: fmt.Sprintf("fsap-kept-%d", i), Path: v.Path, UID: v.UID, GID: v.GID, Allocated: v.Allocated}, false)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	before, gets := len(k.Requests()), k.Count("GET")
	b.SetParallelism(8) // 16 goroutines: batches of about 3 operations a write, as in a storm
	b.ResetTimer()
	var names atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := life(fmt.Sprintf("pvc-%08d", names.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(len(k.Requests())-before)/float64(b.N), "requests/pair")
	b.ReportMetric(float64(k.Count("GET")-gets)/float64(b.N), "GETs/pair")
}
