package testutil

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Logs is a slog handler that keeps every record, for tests that check
// what was logged: safe for concurrent loggers and readers.
type Logs struct {
	root  *logsRoot
	attrs []slog.Attr
}

type logsRoot struct {
	mu   sync.Mutex
	recs []Record
}

// Record is one record kept, its attributes (those of With too) as
// strings.
type Record struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

func (r Record) String() string { return fmt.Sprintf("%s %q %v", r.Level, r.Message, r.Attrs) }

// NewLogs returns an empty handler; Logger wraps it.
func NewLogs() *Logs { return &Logs{root: &logsRoot{}} }

// Logger is a logger writing to l.
func (l *Logs) Logger() *slog.Logger { return slog.New(l) }

func (l *Logs) Enabled(context.Context, slog.Level) bool { return true }

func (l *Logs) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range l.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.Attrs[a.Key] = a.Value.String(); return true })
	l.root.mu.Lock()
	defer l.root.mu.Unlock()
	l.root.recs = append(l.root.recs, rec)
	return nil
}

func (l *Logs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Logs{root: l.root, attrs: append(append([]slog.Attr(nil), l.attrs...), attrs...)}
}

func (l *Logs) WithGroup(string) slog.Handler { return l }

// Records returns a copy of the records kept so far.
func (l *Logs) Records() []Record {
	l.root.mu.Lock()
	defer l.root.mu.Unlock()
	return append([]Record(nil), l.root.recs...)
}

// Count is the number of records at level whose message holds substr.
func (l *Logs) Count(level slog.Level, substr string) int {
	n := 0
	for _, r := range l.Records() {
		if r.Level == level && strings.Contains(r.Message, substr) {
			n++
		}
	}
	return n
}
