// Package testutil holds small helpers the tests of several packages share.
package testutil

import (
	"bytes"
	"sync"
)

// Buffer collects a process's output while it runs: safe for a writer and
// readers at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
