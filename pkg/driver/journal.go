package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
)

// journalCheckTimeout bounds auto's check that the journal's ConfigMaps may be used.
const journalCheckTimeout = 10 * time.Second

// journalStore opens the record the controller keeps ownership in
// (--journal): ConfigMaps in the controller's namespace when the
// Kubernetes API is reachable (every replica shares them), else a local
// file that the controllers of one host share (make run, tests).
//
// auto does not choose ConfigMaps that the service account may not use:
// under upstream's RBAC (its chart or manifests, which grant no ConfigMaps),
// every CreateVolume would fail. The record is then the pod's file, as
// upstream keeps none at all, and a warning names the Role that grants them.
func journalStore(ctx context.Context, cfg Config, kc *kube.Client) (journal.Store, error) {
	mode, dir, _ := strings.Cut(cmp.Or(cfg.Journal, "auto"), ":")
	switch mode {
	case "auto":
		mode = "file"
		ns := cmp.Or(cfg.LeaseNamespace, kube.PodNamespace())
		switch {
		case kc != nil && ns != "":
			mode = "kubernetes"
			cctx, cancel := context.WithTimeout(ctx, journalCheckTimeout)
			forbidden, err := kc.JournalForbidden(cctx, ns)
			cancel()
			switch {
			case forbidden:
				mode = "file"
				cfg.Logger.Warn("the record is not kept in Kubernetes: the controller's service account may not list ConfigMaps in its namespace (grant the chart's Role efs-csi-controller-journal); replicas on other hosts do not share it",
					slog.String("namespace", ns), slog.String("error", err.Error()))
			case err != nil:
				// Unknown (the API did not answer): the ConfigMaps, whose
				// calls then say so, rather than a record no other replica sees.
				cfg.Logger.Info("the journal's ConfigMaps could not be checked", slog.String("error", err.Error()))
			}
		case kc != nil:
			cfg.Logger.Warn("the record is not kept in Kubernetes: the controller's namespace is unknown outside a pod (set --leader-election-namespace)")
		}
	case "kubernetes", "file":
	default:
		return nil, fmt.Errorf("--journal %q: want auto, kubernetes, file or file:DIR", cfg.Journal)
	}
	if mode == "kubernetes" {
		if kc == nil {
			return nil, errors.New("--journal kubernetes needs the Kubernetes API: run in a pod or set --kube-api-url")
		}
		ns := cmp.Or(cfg.LeaseNamespace, kube.PodNamespace())
		if ns == "" {
			return nil, errors.New("--journal kubernetes: --leader-election-namespace is required outside a pod")
		}
		return kc.JournalStore(ns, cfg.DriverName), nil
	}
	if dir == "" {
		dir = filepath.Join(cmp.Or(cfg.TempDir, os.TempDir()), "efs-csi-journal")
	}
	s, err := journal.OpenFile(dir)
	if err != nil {
		return nil, fmt.Errorf("--journal: %w", err)
	}
	cfg.Logger.Info("the record is a local file: only controllers of this host share it", "dir", dir)
	return s, nil
}
