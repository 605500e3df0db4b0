package core

import (
	"context"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// listing is a gid.Source that lists the same access points every time.
type listing []efs.AccessPoint

func (l listing) ListAccessPoints(_ context.Context, _ string, fn func([]efs.AccessPoint) error) error {
	return fn(l)
}

// refresh executes a Refresh for f's allocator as the shell does, with a
// listing showing aps.
func refresh(f *FS, e Refresh, aps ...efs.AccessPoint) error {
	return f.alloc.Refresh(context.Background(), listing(aps), e.FileSystem, e.Since)
}

// listedFS is a file system's memory whose allocator has listed it empty:
// its creates reserve with no Refresh.
func listedFS() *FS {
	f := NewFS(fsID)
	if err := refresh(f, Refresh{FileSystem: fsID}); err != nil {
		panic(err)
	}
	return f
}
