package audit

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/snapshot"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// snapshotRecord is what the record says of one file system's snapshot
// area (pkg/snapshot): the snapshots it holds, by the copy key of their
// life (snapshot.CopyKey), and whether each is ready; the restores
// unfinished, by key.
type snapshotRecord struct {
	ready    map[string]bool // copy key -> ready
	restores map[string]bool // restore key (of its volume ID) -> unfinished
}

// readSnapshotRecord reads the record's snapshot and restore entries, by
// file system; nil if the record has none or cannot be read (then the area
// is not judged: nothing there is provably left over).
func readSnapshotRecord(ctx context.Context, st journal.Store) (map[string]*snapshotRecord, error) {
	out := map[string]*snapshotRecord{}
	of := func(fs string) *snapshotRecord {
		if out[fs] == nil {
			out[fs] = &snapshotRecord{ready: map[string]bool{}, restores: map[string]bool{}}
		}
		return out[fs]
	}
	err := st.List(ctx, snapshot.KindSnapshot, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			var v struct {
				Ready bool
				Life  string
			}
			_ = json.Unmarshal(e.Value, &v) // a damaged entry: not ready (its copies are not judged left)
			of(e.Key.FileSystem).ready[snapshot.CopyKey(e.Key.Name, v.Life)] = v.Ready
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = st.List(ctx, snapshot.KindRestore, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			var v struct{ Done bool }
			_ = json.Unmarshal(e.Value, &v)
			of(e.Key.FileSystem).restores[e.Key.Name] = !v.Done
		}
		return nil
	})
	return out, err
}

// scanSnapshots judges the snapshot area of the file system mounted at
// root against its record rec: a copy no snapshot entry names, or an
// attempt's directory (.tmp-, .restore-) of no snapshot being copied or
// restore unfinished, is left over (a controller killed between its
// rename and its entry's check, or a restore given up before the
// collector's round). It returns the copies the record names and those
// left over.
func scanSnapshots(root string, rec *snapshotRecord) (recorded int, left []string, err error) {
	area := "/" + volume.SnapshotDir
	entries, err := os.ReadDir(root + area)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	if rec == nil {
		rec = &snapshotRecord{}
	}
	for _, e := range entries {
		name := e.Name()
		var ok bool
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			key, _, _ := strings.Cut(strings.TrimPrefix(name, ".tmp-"), "-")
			ready, named := rec.ready[key]
			ok = named && !ready // a copy under way
		case strings.HasPrefix(name, ".restore-"):
			key, _, _ := strings.Cut(strings.TrimPrefix(name, ".restore-"), "-")
			ok = rec.restores[key] // a restore unfinished
		default:
			_, ok = rec.ready[name]
			if ok {
				recorded++
			}
		}
		if !ok {
			left = append(left, path.Join(area, name))
		}
	}
	return recorded, left, nil
}
