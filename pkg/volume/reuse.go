package volume

import (
	"strings"
)

// reuseProbeNames are volume names that RootDirFits expands the class with
// to tell which parts of a root directory come from the volume's name.
var reuseProbeNames = []string{
	"pvc-00000000-0000-0000-0000-000000000000",
	"pvc-11111111-1111-1111-1111-111111111111",
	"pvc-2a2a2a2a-2a2a-2a2a-2a2a-2a2a2a2a2a2a",
	"pvc-f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f",
}

// RootDirFits reports whether dir is a root directory this class computes
// for some volume name: the same depth and the same components, except that
// a component derived from the volume's name (the default name, ${.PV.name},
// the unique suffix) only has to start with what it has in common for every
// name and pass EFS's rules. reuseAccessPoint adopts an access point made for
// an earlier claim of the same name (so under another volume name) only if
// it fits: an access point of another class, base path or namespace pattern
// does not.
func (p Params) RootDirFits(dir string) bool {
	if CheckRootDir(dir) != nil {
		return false
	}
	var probes [][]string
	for _, name := range reuseProbeNames {
		d, err := p.RootDir(name)
		if err != nil {
			return false
		}
		probes = append(probes, strings.Split(d[1:], "/"))
	}
	got := strings.Split(dir[1:], "/")
	for _, segs := range probes {
		if len(segs) != len(got) {
			return false
		}
	}
	for i, seg := range got {
		common := probes[0][i]
		for _, segs := range probes[1:] {
			common = commonPrefix(common, segs[i])
		}
		if common == probes[0][i] { // the same for every name: fixed
			if seg != common {
				return false
			}
			continue
		}
		if !strings.HasPrefix(seg, common) {
			return false
		}
	}
	return true
}

func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}

// RootDirHasNamespace reports whether dir fits this class (RootDirFits)
// and proves the claim's namespace: the class's directories depend on the
// namespace (subPathPattern uses ${.PVC.namespace}), so a directory that
// fits with this claim's namespace does not fit with another's.
func (p Params) RootDirHasNamespace(dir string) bool {
	if p.PVCNamespace == "" || !p.RootDirFits(dir) {
		return false
	}
	other := p
	other.PVCNamespace = "efs-csi-probe-namespace-a"
	if other.PVCNamespace == p.PVCNamespace {
		other.PVCNamespace = "efs-csi-probe-namespace-b"
	}
	return !other.RootDirFits(dir)
}
