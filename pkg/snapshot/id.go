package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// IDPrefix marks a snapshot ID: "efssnap:fs-X:<key>", the key 32 hex
// digits of sha256 of the CO's snapshot name, so that the same name is
// the same snapshot after any restart, on any replica.
const IDPrefix = "efssnap:"

// Area is the directory at a file system's root that holds snapshots:
// Area/<key>/data (the copy) and Area/<key>/manifest.json, made as
// Area/.tmp-<key>-<random> and renamed into place last. Its name starts
// with '.', which EFS refuses in every component of an access point's
// root directory, a basePath and a subPathPattern's expansion (as
// volume.TrashDir): no volume's root but "/" reaches it; a directory
// volume's ID naming it is refused (volume.ParseID).
const Area = volume.SnapshotDir

// KeyOf is the key of the snapshot named name.
func KeyOf(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:16])
}

// ID is the snapshot ID of key on file system fsID.
func ID(fsID, key string) string { return IDPrefix + fsID + ":" + key }

// ParseID returns the file system and key a snapshot ID names; ok false
// for anything that is not one.
func ParseID(id string) (fsID, key string, ok bool) {
	rest, found := strings.CutPrefix(id, IDPrefix)
	if !found {
		return "", "", false
	}
	fsID, key, found = strings.Cut(rest, ":")
	if !found || !volume.ValidFileSystemID(fsID) || !volume.ValidKey(key) {
		return "", "", false
	}
	return fsID, key, true
}

// dir is the snapshot's directory, relative to the file system's root.
func dir(key string) string { return Area + "/" + key }

// DataDir is the copy of the snapshot of key, as an absolute path of the
// file system.
func DataDir(key string) string { return volume.SnapshotData(key) }
