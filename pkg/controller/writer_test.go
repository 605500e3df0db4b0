package controller

import "testing"

func TestWriterLiveness(t *testing.T) {
	me := writer{host: "pod-a", pid: 1, start: 100, nonce: "x"}
	procs := map[int]uint64{1: 100, 7: 700}
	procStart := func(pid int) (uint64, bool) { s, ok := procs[pid]; return s, ok }
	tests := []struct {
		name string
		tag  string
		want liveness
	}{
		{"this Service", me.String(), writerMe},
		{"another Service of this process", writer{"pod-a", 1, 100, "y"}.String(), writerAlive},
		{"a container restart before this one (PID 1 again)", writer{"pod-a", 1, 42, "x"}.String(), writerDead},
		{"a live process on this host", writer{"pod-a", 7, 700, "z"}.String(), writerAlive},
		{"a reused PID on this host", writer{"pod-a", 7, 699, "z"}.String(), writerDead},
		{"a gone process on this host", writer{"pod-a", 9, 900, "z"}.String(), writerDead},
		{"another pod", writer{"pod-b", 1, 100, "x"}.String(), writerUnknown},
		{"no tag: upstream or an older release", "", writerLegacy},
		{"garbage", "a/b/c", writerLegacy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := me.livenessOf(tt.tag, procStart); got != tt.want {
				t.Errorf("livenessOf(%q) = %v, want %v", tt.tag, got, tt.want)
			}
		})
	}
	if _, ok := procStartTime(1 << 30); ok {
		t.Error("a PID that cannot exist has a start time")
	}
	if s, ok := procStartTime(selfWriter("n").pid); !ok || s == 0 {
		t.Errorf("own start time = %d, %v", s, ok)
	}
}
