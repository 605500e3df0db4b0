package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxSymlinkHops bounds symlink resolution as the kernel does (ELOOP).
const maxSymlinkHops = 40

// SafeJoin joins base and an untrusted sub path (relative, or absolute
// meaning relative to base) and returns a path inside base: base itself or
// below base+"/". It is purely lexical: a sub path with a ".." component or a
// NUL byte is refused with ErrUnsafePath rather than cleaned, since nobody
// legitimately sends one. base must be absolute.
func SafeJoin(base, sub string) (string, error) {
	cleanBase, comps, err := splitInside(base, sub)
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{cleanBase}, comps...)...), nil
}

// splitInside validates base and sub and returns the clean base and sub's
// components (no "", "." or "..").
func splitInside(base, sub string) (string, []string, error) {
	if !filepath.IsAbs(base) {
		return "", nil, fmt.Errorf("%w: base %q is not absolute", ErrUnsafePath, base)
	}
	if strings.ContainsRune(sub, 0) {
		return "", nil, fmt.Errorf("%w: %q contains NUL", ErrUnsafePath, truncate(sub, 128))
	}
	var comps []string
	for _, c := range strings.Split(filepath.ToSlash(sub), "/") {
		switch c {
		case "", ".":
		case "..":
			return "", nil, fmt.Errorf("%w: %q has a \"..\" component", ErrUnsafePath, truncate(sub, 128))
		default:
			comps = append(comps, c)
		}
	}
	return filepath.Clean(base), comps, nil
}

// ResolveInside is SafeJoin followed by symlink resolution, component by
// component, as filepath.EvalSymlinks would do it but with base as the
// boundary: a link whose target leaves base (an absolute target outside it,
// or enough ".." to climb above it) is refused with ErrUnsafePath, never
// followed. Components that do not exist are joined lexically. The result is
// base or a path below it.
//
// It checks the tree as it is now: a path that someone changes between this
// call and its use is not covered.
func ResolveInside(base, sub string) (string, error) {
	return resolveInside(base, sub, true)
}

// ResolveParentInside is ResolveInside except that the last component is not
// followed if it is a symlink: the result names the link itself. This is what
// removing a directory wants: removing a link must not remove what it points
// to (another volume's directory, say).
func ResolveParentInside(base, sub string) (string, error) {
	return resolveInside(base, sub, false)
}

func resolveInside(base, sub string, followLast bool) (string, error) {
	root, pending, err := splitInside(base, sub)
	if err != nil {
		return "", err
	}
	cur := root
	hops := 0
	missing := false // once a component is missing the rest is lexical
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..": // only ever from a link target
			if cur == root {
				return "", fmt.Errorf("%w: %q climbs above %s through a symlink", ErrUnsafePath, truncate(sub, 128), root)
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		if missing || (!followLast && len(pending) == 0) {
			cur = next
			continue
		}
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			missing = true
			cur = next
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return "", fmt.Errorf("%w: %q: too many levels of symbolic links", ErrUnsafePath, truncate(sub, 128))
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			rel, ok := within(root, filepath.Clean(target))
			if !ok {
				return "", fmt.Errorf("%w: symlink %s points outside %s", ErrUnsafePath, next, root)
			}
			cur = root
			target = rel
		}
		pending = append(strings.Split(filepath.ToSlash(target), "/"), pending...)
	}
	if _, ok := within(root, cur); !ok { // unreachable; belt and braces
		return "", fmt.Errorf("%w: %q resolves outside %s", ErrUnsafePath, truncate(sub, 128), root)
	}
	return cur, nil
}

// within reports whether p is root or below it, and p relative to root.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}
