package driver

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
)

// journalStore opens the record the controller keeps ownership in
// (--journal): ConfigMaps in the controller's namespace when the
// Kubernetes API is reachable (every replica shares them), else a local
// file that the controllers of one host share (make run, tests).
func journalStore(cfg Config, kc *kube.Client) (journal.Store, error) {
	mode, dir, _ := strings.Cut(cmp.Or(cfg.Journal, "auto"), ":")
	switch mode {
	case "auto":
		mode = "file"
		if kc != nil && cmp.Or(cfg.LeaseNamespace, kube.PodNamespace()) != "" {
			mode = "kubernetes"
		} else if kc != nil {
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
