package snapshot

import (
	"encoding/json"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// The record's snapshot, restore and read-only volume entries, and a
// copy's manifest, are read from what anyone who may write the record (or
// the file system's root) could have written: any bytes give an entry or
// an error, never a panic; an ID read back names the entry's key (a
// read-only volume's, the snapshot it names and that snapshot's copy);
// ParseID accepts only what ID makes.
func FuzzSnapshotEntriesAndIDs(f *testing.F) {
	f.Add([]byte(`{"name":"s","source":"efs:fs-0123456789abcdef0::fsap-0123456789abcdef0","fileSystem":"fs-0123456789abcdef0","sourcePath":"/a","created":"2026-01-01T00:00:00Z","ready":true,"size":5}`), "efssnap:fs-0123456789abcdef0:0123456789abcdef0123456789abcdef")
	f.Add([]byte(`{"created":"not a time"}`), "efssnap:fs-0:x")
	f.Add([]byte(`[]`), "efssnap:fs-0123456789abcdef0:0123456789ABCDEF0123456789abcdef")
	f.Add([]byte("\xff"), "")
	f.Add([]byte(`{"name":"pvc-1","snapshot":"efssnap:fs-0123456789abcdef0:0123456789abcdef0123456789abcdef","claim":"ns/c","created":"2026-01-01T00:00:00Z"}`), "pvc-1")
	f.Add([]byte(`{"name":"pvc-1","snapshot":"efssnap:fs-0123456789abcdef1:0123456789abcdef0123456789abcdef"}`), "pvc-1")
	f.Fuzz(func(t *testing.T, raw []byte, id string) {
		e := journal.Entry{Key: snapshotKey("fs-0123456789abcdef0", KeyOf(id)), Value: raw}
		if snap, err := decodeSnapshot(e); err == nil {
			if fs, key, ok := ParseID(snap.ID); !ok || fs != e.Key.FileSystem || key != e.Key.Name {
				t.Errorf("ID %q does not name its entry %v", snap.ID, e.Key)
			}
		}
		if r, err := decodeReader(journal.Entry{Key: readerKey("fs-0123456789abcdef0", id), Value: raw}); err == nil {
			v, err := volume.ParseID(r.VolumeID)
			if err != nil || v.Reader != KeyOf(id) || v.Path != DataDir(r.Copy) || v.Snapshot != r.Copy || v.FileSystemID != "fs-0123456789abcdef0" {
				t.Errorf("read-only volume %q of entry %s: %+v, %v", r.VolumeID, KeyOf(id), v, err)
			}
		}
		var m manifest
		_ = json.Unmarshal(raw, &m)
		var r restore
		_ = json.Unmarshal(raw, &r)
		if fs, key, ok := ParseID(id); ok && ID(fs, key) != id {
			t.Errorf("ParseID(%q) = %s, %s: not what ID makes", id, fs, key)
		}
	})
}
