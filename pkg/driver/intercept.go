package driver

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// Request fields worth a log line. Secrets, parameters and contexts are never
// logged: a CSI request may carry credentials in any map.
type (
	withName     interface{ GetName() string }
	withVolumeID interface{ GetVolumeId() string }
	withTarget   interface{ GetTargetPath() string }
)

// maxLoggedError bounds the error text of a log line.
const maxLoggedError = 2048

// clip cuts s to n bytes, saying how much was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s...(%d more bytes)", strings.ToValidUTF8(s[:n], ""), len(s)-n)
}

// intercept gives every RPC one log line with its outcome, its metrics, and
// its gRPC code from the one code table.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	start := time.Now()
	done := d.metrics.RPCStarted(method)
	var requests atomic.Int64
	ctx = efs.WithRequestCounter(ctx, &requests)
	var resp any
	err := checkBounds(req)
	if err == nil {
		resp, err = handler(ctx, req)
	}
	d.metrics.RPCRequests(method, requests.Load())
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	err = toStatus(err)
	code := status.Code(err)
	done(code.String())

	attrs := []slog.Attr{slog.String("method", method), slog.String("code", code.String()),
		slog.Duration("duration", time.Since(start))}
	if r, ok := req.(withName); ok && r.GetName() != "" {
		attrs = append(attrs, slog.String("name", clip(r.GetName(), maxStringField)))
	}
	if r, ok := req.(withVolumeID); ok && r.GetVolumeId() != "" {
		attrs = append(attrs, slog.String("volumeID", clip(r.GetVolumeId(), maxStringField)))
	}
	if r, ok := req.(withTarget); ok && r.GetTargetPath() != "" {
		attrs = append(attrs, slog.String("target", clip(r.GetTargetPath(), 512)))
	}
	level := slog.LevelInfo
	if err != nil {
		// The operator's log keeps the whole (bounded) error; the status
		// the CO puts into tenant-visible events is redacted (toStatus).
		attrs = append(attrs, slog.String("error", clip(detail, maxLoggedError)))
		level = slog.LevelWarn
	}
	d.log.LogAttrs(ctx, level, "rpc", attrs...)
	return resp, err
}
