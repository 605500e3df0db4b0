package snapshot

import (
	"encoding/json"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// The record's snapshot and restore entries, and a copy's manifest, are
// read from what anyone who may write the record (or the file system's
// root) could have written: any bytes give a snapshot or an error, never
// a panic; an ID read back names the entry's key; ParseID accepts only
// what ID makes.
func FuzzSnapshotEntriesAndIDs(f *testing.F) {
	f.Add([]byte(`{"name":"s","source":"efs:fs-0123456789abcdef0::fsap-0123456789abcdef0","fileSystem":"fs-0123456789abcdef0","sourcePath":"/a","created":"2026-01-01T00:00:00Z","ready":true,"size":5}`), "efssnap:fs-0123456789abcdef0:0123456789abcdef0123456789abcdef")
	f.Add([]byte(`{"created":"not a time"}`), "efssnap:fs-0:x")
	f.Add([]byte(`[]`), "efssnap:fs-0123456789abcdef0:0123456789ABCDEF0123456789abcdef")
	f.Add([]byte("\xff"), "")
	f.Fuzz(func(t *testing.T, raw []byte, id string) {
		e := journal.Entry{Key: snapshotKey("fs-0123456789abcdef0", KeyOf(id)), Value: raw}
		if snap, err := decodeSnapshot(e); err == nil {
			if fs, key, ok := ParseID(snap.ID); !ok || fs != e.Key.FileSystem || key != e.Key.Name {
				t.Errorf("ID %q does not name its entry %v", snap.ID, e.Key)
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
