package volume

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSafeJoin(t *testing.T) {
	tests := []struct {
		base, sub, want string
	}{
		{"/mnt/fs", "a/b", "/mnt/fs/a/b"},
		{"/mnt/fs", "/a/b", "/mnt/fs/a/b"},
		{"/mnt/fs/", "./a//b/", "/mnt/fs/a/b"},
		{"/mnt/fs", "", "/mnt/fs"},
		{"/mnt/fs", "/", "/mnt/fs"},
		{"/", "a", "/a"},
		{"/mnt/fs", "a..b/..c", "/mnt/fs/a..b/..c"},
	}
	for _, tt := range tests {
		got, err := SafeJoin(tt.base, tt.sub)
		if err != nil || got != tt.want {
			t.Errorf("SafeJoin(%q, %q) = %q, %v; want %q", tt.base, tt.sub, got, err, tt.want)
		}
	}
	for _, bad := range []struct{ base, sub string }{
		{"/mnt/fs", ".."},
		{"/mnt/fs", "../x"},
		{"/mnt/fs", "a/../../x"},
		{"/mnt/fs", "a/../b"}, // harmless, but never legitimate: refused
		{"/mnt/fs", "a\x00b"},
		{"relative", "a"},
		{"", "a"},
	} {
		if got, err := SafeJoin(bad.base, bad.sub); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("SafeJoin(%q, %q) = %q, %v; want ErrUnsafePath", bad.base, bad.sub, got, err)
		}
	}
}

// tree builds, under a temporary base, the directories and symlinks the
// resolution tests walk through, and an "outside" directory next to base.
func tree(t testing.TB) (base, outside string) {
	t.Helper()
	top := t.TempDir()
	base, outside = filepath.Join(top, "base"), filepath.Join(top, "outside")
	for _, d := range []string{base + "/vol/data", base + "/other", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"rel-ok":        "vol/data",      // relative, stays inside
		"vol/up-ok":     "../other",      // climbs, but not above base
		"abs-ok":        base + "/other", // absolute, inside base
		"rel-escape":    "../outside",    // climbs above base
		"vol/deep-esc":  "../../outside",
		"abs-escape":    outside,
		"abs-root":      "/",
		"loop-a":        "loop-b",
		"loop-b":        "loop-a",
		"chain":         "rel-ok",
		"dangling":      "nowhere/x",
		"dangling-esc":  "nowhere/../../outside",
		"vol/data-link": "../other",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	return base, outside
}

func TestResolveInside(t *testing.T) {
	base, _ := tree(t)
	tests := []struct {
		sub        string
		want       string // relative to base; "" = base itself
		wantParent string // ResolveParentInside; "-" = same as want
	}{
		{"vol/data", "vol/data", "-"},
		{"/vol/data", "vol/data", "-"},
		{"", "", "-"},
		{"rel-ok", "vol/data", "rel-ok"},
		{"rel-ok/x", "vol/data/x", "vol/data/x"},
		{"vol/up-ok", "other", "vol/up-ok"},
		{"abs-ok", "other", "abs-ok"},
		{"chain/y", "vol/data/y", "vol/data/y"},
		{"missing/a/b", "missing/a/b", "-"},
		{"dangling", "nowhere/x", "dangling"},
		{"vol/data-link", "other", "vol/data-link"},
	}
	for _, tt := range tests {
		t.Run(tt.sub, func(t *testing.T) {
			got, err := ResolveInside(base, tt.sub)
			if err != nil || got != filepath.Join(base, tt.want) {
				t.Fatalf("ResolveInside(%q) = %q, %v; want %q", tt.sub, got, err, filepath.Join(base, tt.want))
			}
			wantParent := tt.wantParent
			if wantParent == "-" {
				wantParent = tt.want
			}
			got, err = ResolveParentInside(base, tt.sub)
			if err != nil || got != filepath.Join(base, wantParent) {
				t.Fatalf("ResolveParentInside(%q) = %q, %v; want %q", tt.sub, got, err, filepath.Join(base, wantParent))
			}
		})
	}
}

func TestResolveInsideRefusesEscapes(t *testing.T) {
	base, _ := tree(t)
	for _, sub := range []string{
		"rel-escape", "rel-escape/x", "vol/deep-esc", "abs-escape", "abs-escape/x",
		"abs-root", "abs-root/etc", "loop-a", "dangling-esc", "../outside", "vol/../../outside",
	} {
		t.Run(sub, func(t *testing.T) {
			got, err := ResolveInside(base, sub)
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("ResolveInside(%q) = %q, %v; want ErrUnsafePath", sub, got, err)
			}
		})
	}
	// The last component is not followed by ResolveParentInside, so a link
	// to outside is returned as the link itself (removing it is harmless)...
	if got, err := ResolveParentInside(base, "abs-escape"); err != nil || got != filepath.Join(base, "abs-escape") {
		t.Fatalf("ResolveParentInside(abs-escape) = %q, %v", got, err)
	}
	// ...but an escaping link in the middle is still refused.
	if got, err := ResolveParentInside(base, "abs-escape/x"); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("ResolveParentInside(abs-escape/x) = %q, %v; want ErrUnsafePath", got, err)
	}
}
