package driver

import (
	"context"
	"log/slog"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Request fields worth a log line. Secrets, parameters and contexts are never
// logged: a CSI request may carry credentials in any map.
type (
	withName     interface{ GetName() string }
	withVolumeID interface{ GetVolumeId() string }
	withTarget   interface{ GetTargetPath() string }
)

// intercept gives every RPC one log line with its outcome, its metrics, and
// its gRPC code from the one code table.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	start := time.Now()
	done := d.metrics.RPCStarted(method)
	resp, err := handler(ctx, req)
	err = toStatus(err)
	code := status.Code(err)
	done(code.String())

	attrs := []slog.Attr{slog.String("method", method), slog.String("code", code.String()),
		slog.Duration("duration", time.Since(start))}
	if r, ok := req.(withName); ok && r.GetName() != "" {
		attrs = append(attrs, slog.String("name", r.GetName()))
	}
	if r, ok := req.(withVolumeID); ok && r.GetVolumeId() != "" {
		attrs = append(attrs, slog.String("volumeID", r.GetVolumeId()))
	}
	if r, ok := req.(withTarget); ok && r.GetTargetPath() != "" {
		attrs = append(attrs, slog.String("target", r.GetTargetPath()))
	}
	level := slog.LevelInfo
	if err != nil {
		attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
		level = slog.LevelWarn
	}
	d.log.LogAttrs(ctx, level, "rpc", attrs...)
	return resp, err
}
