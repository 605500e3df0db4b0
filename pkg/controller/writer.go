package controller

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TagWriter names the controller process that created an access point:
// "<host>/<pid>/<start>/<nonce>". A process that finds the access point by
// its client token uses it to tell whether the creator may still be verifying
// it (see verifier): a creator on this host whose process is gone cannot.
const TagWriter = "efs.csi.aws.com/writer"

// writer identifies one controller Service: the pod (or host) it runs on,
// its process ID and start time (clock ticks since boot, from /proc, so a
// reused PID is told apart), and a random nonce per Service.
type writer struct {
	host  string
	pid   int
	start uint64
	nonce string
}

func (w writer) String() string {
	return fmt.Sprintf("%s/%d/%d/%s", w.host, w.pid, w.start, w.nonce)
}

// parseWriter reads a TagWriter value; ok is false for anything else.
func parseWriter(s string) (w writer, ok bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return writer{}, false
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return writer{}, false
	}
	return writer{host: parts[0], pid: pid, start: start, nonce: parts[3]}, true
}

// liveness of another writer, as far as this process can tell.
type liveness int

const (
	writerMe      liveness = iota // this Service
	writerAlive                   // provably running (same process, or same host and a live PID with its start time)
	writerDead                    // provably gone: same host, its PID is gone or reused
	writerUnknown                 // another host: may be running
	// writerLegacy: no (valid) writer tag: made by the upstream driver or a
	// release before writer tags, neither of which deletes an access point
	// it made once its create returned... except this project's previous
	// release during a rolling update, whose verification yielded by
	// listing order (see docs/design.md, Known limits).
	writerLegacy
)

// livenessOf classifies the creator named by an access point's TagWriter.
// procStart reads a PID's start time; it is a parameter for tests.
func (me writer) livenessOf(tag string, procStart func(pid int) (uint64, bool)) liveness {
	w, ok := parseWriter(tag)
	switch {
	case !ok:
		return writerLegacy
	case w.host != me.host:
		return writerUnknown
	case w == me:
		return writerMe
	case w.pid == me.pid && w.start == me.start:
		return writerAlive // another Service in this process
	}
	if start, ok := procStart(w.pid); ok && start == w.start {
		return writerAlive
	}
	return writerDead
}

// selfWriter describes this process. The host is $POD_NAME (unique per pod,
// also with hostNetwork), else the hostname.
func selfWriter(nonce string) writer {
	host := os.Getenv("POD_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	host = strings.ReplaceAll(host, "/", "_")
	start, _ := procStartTime(os.Getpid())
	return writer{host: host, pid: os.Getpid(), start: start, nonce: nonce}
}

// procStartTime is field 22 of /proc/<pid>/stat: the process's start time
// in clock ticks since boot; ok is false when the process does not exist.
func procStartTime(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// and parentheses: count fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	return v, err == nil
}
