// Package logging builds the structured logger every binary uses.
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// New returns a slog logger writing format ("json" or "text") to w.
func New(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}
