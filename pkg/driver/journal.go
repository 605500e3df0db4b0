package driver

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
)

// journalStore opens the record the controller keeps ownership in
// (--journal):
//
//   - kubernetes, leases, auto with the Kubernetes API and the controller's
//     namespace known: Leases in that namespace (kube.LeaseJournalStore),
//     which every replica shares and which upstream's RBAC grants as this
//     chart's does.
//   - file[:DIR], auto without the API or namespace: a local file that the
//     controllers of one host share (make run, tests). One process: a
//     record per pod is not a world this driver serves.
func journalStore(cfg Config, kc *kube.Client) (journal.Store, error) {
	mode, dir, _ := strings.Cut(cmp.Or(cfg.Journal, "auto"), ":")
	ns := cmp.Or(cfg.LeaseNamespace, kube.PodNamespace())
	switch mode {
	case "auto":
		switch {
		case kc != nil && ns != "":
			mode = "leases"
		case kc != nil:
			mode = "file"
			cfg.Logger.Warn("the record is not kept in Kubernetes: the controller's namespace is unknown outside a pod (set --leader-election-namespace)")
		default:
			mode = "file"
		}
	case "kubernetes":
		mode = "leases"
	case "leases", "file":
	default:
		return nil, fmt.Errorf("--journal %q: want auto, kubernetes (= leases), leases, file or file:DIR", cfg.Journal)
	}
	if mode == "file" {
		fileDir := cmp.Or(dir, filepath.Join(cmp.Or(cfg.TempDir, os.TempDir()), "efs-csi-journal"))
		s, err := journal.OpenFile(fileDir)
		if err != nil {
			return nil, fmt.Errorf("--journal: %w", err)
		}
		cfg.Logger.Info("the record is a local file: only controllers of this host share it", "dir", fileDir)
		return s, nil
	}
	if kc == nil {
		return nil, fmt.Errorf("--journal %s needs the Kubernetes API: run in a pod or set --kube-api-url", cfg.Journal)
	}
	if ns == "" {
		return nil, fmt.Errorf("--journal %s: --leader-election-namespace is required outside a pod", cfg.Journal)
	}
	cfg.Logger.Info("the record is kept in Leases", slog.String("namespace", ns), slog.Int("rootShards", kube.RootShards))
	return kc.LeaseJournalStore(ns, cfg.DriverName), nil
}
