package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// NewKlog returns the driver's logger with klog owning the output, as in the
// kubernetes-csi sidecars of the same pods: "text" writes klog's line format
// (klog's flags -v, --vmodule, --logtostderr, ... apply; slog's Info is V(0),
// Debug V(4)); "json" writes one JSON object per line to w, and klog's own
// output (client-go's, say) goes there too. Call after flag.Parse.
func NewKlog(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "", "text":
		return slog.New(logr.ToSlogHandler(klog.Background())), nil
	case "json":
		level := slog.LevelInfo
		if klog.V(4).Enabled() {
			level = slog.LevelDebug
		}
		log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
		klog.SetSlogLogger(log)
		return log, nil
	}
	return nil, fmt.Errorf("logging format %q: want text or json", format)
}
