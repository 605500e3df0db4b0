package snapshot

import (
	"encoding/json"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"os"
	"syscall"
	"testing"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUnJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func fileOwner(fi os.FileInfo) [2]int {
	st := fi.Sys().(*syscall.Stat_t)
	return [2]int{int(st.Uid), int(st.Gid)}
}

var keylockBusy = keylock.ErrBusy
