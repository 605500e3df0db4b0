package driver

import (
	"bytes"
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

// journalCheckTimeout bounds the check that the old ConfigMaps record may
// be read, before it is imported.
const journalCheckTimeout = 10 * time.Second

// inPod reports whether the process runs in a pod (its service account's
// namespace is mounted): then the default file record's directory is the
// pod's own.
var inPod = func() bool { return kube.PodNamespace() != "" }

// Re-imports of the ConfigMaps record: during a rolling upgrade the old
// controller (maxSurge 1) may still write ConfigMaps after the new one has
// imported them, until it stops.
var (
	reimportEvery = 30 * time.Second
	reimportFor   = 15 * time.Minute
)

// journalStore opens the record the controller keeps ownership in
// (--journal):
//
//   - kubernetes, leases, auto with the Kubernetes API and the controller's
//     namespace known: Leases in that namespace (kube.LeaseJournalStore),
//     which every replica shares and which upstream's RBAC grants as this
//     chart's does. A record left in ConfigMaps (this driver's earlier
//     releases) or in the pod's file is imported first.
//   - configmaps: ConfigMaps in that namespace (the earlier releases' record;
//     needs the chart's Role efs-csi-controller-journal).
//   - file[:DIR], auto without the API or namespace: a local file that the
//     controllers of one host share (make run, tests).
func journalStore(ctx context.Context, cfg Config, kc *kube.Client) (journal.Store, error) {
	mode, dir, _ := strings.Cut(cmp.Or(cfg.Journal, "auto"), ":")
	ns := cmp.Or(cfg.LeaseNamespace, kube.PodNamespace())
	fileDir := cmp.Or(dir, filepath.Join(cmp.Or(cfg.TempDir, os.TempDir()), "efs-csi-journal"))
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
	case "leases", "configmaps", "file":
	default:
		return nil, fmt.Errorf("--journal %q: want auto, kubernetes (= leases), leases, configmaps, file or file:DIR", cfg.Journal)
	}
	if mode == "file" {
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
	if mode == "configmaps" {
		return kc.JournalStore(ns, cfg.DriverName), nil
	}
	store := kc.LeaseJournalStore(ns, cfg.DriverName)
	cfg.Logger.Info("the record is kept in Leases", slog.String("namespace", ns), slog.Int("rootShards", kube.RootShards))
	// Only a pod's own file: outside a pod the default directory is the
	// host's, which the file record of another controller (make run, a
	// stress run) may be using.
	if inPod() || dir != "" {
		if err := importFile(ctx, cfg, fileDir, store); err != nil {
			return nil, err
		}
	}
	cms := kc.JournalStore(ns, cfg.DriverName)
	cctx, cancel := context.WithTimeout(ctx, journalCheckTimeout)
	forbidden, err := kc.JournalForbidden(cctx, ns)
	cancel()
	switch {
	case forbidden:
		// Upstream's RBAC: no ConfigMaps record can exist to import.
	case err != nil:
		return nil, fmt.Errorf("--journal %s: reading the ConfigMaps record to import it: %w", cfg.Journal, err)
	default:
		n, _, err := importRecord(ctx, cms, store)
		if err != nil {
			return nil, fmt.Errorf("--journal %s: importing the ConfigMaps record: %w", cfg.Journal, err)
		}
		if n > 0 {
			cfg.Logger.Info("the ConfigMaps record was imported into the Leases", slog.Int("entries", n))
		}
		go reimport(ctx, cfg.Logger, cms, store, reimportEvery, reimportFor)
	}
	return store, nil
}

// importFile moves the entries of the file record in dir, if there is
// one, into to: an upgrade from a per-pod file (auto under upstream's RBAC
// in earlier releases) keeps the ownership it recorded.
func importFile(ctx context.Context, cfg Config, dir string, to journal.Store) error {
	if _, err := os.Stat(filepath.Join(dir, "journal.log")); err != nil { // journal.File's log
		return nil // no file record
	}
	fs, err := journal.OpenFile(dir)
	if err != nil {
		return fmt.Errorf("--journal: the file record to import: %w", err)
	}
	defer fs.Close()
	n, _, err := importRecord(ctx, fs, to)
	if err != nil {
		return fmt.Errorf("--journal: importing the file record in %s: %w", dir, err)
	}
	if n > 0 {
		cfg.Logger.Info("the file record was imported into the Leases", slog.String("dir", dir), slog.Int("entries", n))
	}
	return nil
}

// reimport imports the ConfigMaps record again every reimportEvery, for
// reimportFor: an old controller may still be running (a rolling upgrade
// starts the new pod first).
func reimport(ctx context.Context, log *slog.Logger, from, to journal.Store, every, period time.Duration) {
	end := time.Now().Add(period)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		n, _, err := importRecord(ctx, from, to)
		if err != nil {
			log.Warn("importing the ConfigMaps record again", slog.String("error", err.Error()))
			continue
		}
		if n > 0 {
			log.Info("entries written to the ConfigMaps record since the last import were imported", slog.Int("entries", n))
		}
	}
}

// importRecord moves every volume and id entry of from into to: created
// there, then deleted from from (at the version read), so that an entry
// deleted in to later is never imported again. An entry to already holds
// with the same value and index is only deleted from from; with another
// value it is left in both, and more reports it (and entries from could
// not delete). n is how many entries were moved.
func importRecord(ctx context.Context, from, to journal.Store) (n int, more bool, err error) {
	for _, kind := range []journal.Kind{journal.KindVolume, journal.KindID} {
		var entries []journal.Entry
		if err := from.List(ctx, kind, "", "", func(page []journal.Entry) error {
			entries = append(entries, page...)
			return nil
		}); err != nil {
			return n, true, err
		}
		for _, e := range entries {
			got, err := to.Create(ctx, journal.Entry{Key: e.Key, Value: e.Value, Index: e.Index})
			switch {
			case errors.Is(err, journal.ErrExists) && (!bytes.Equal(got.Value, e.Value) || got.Index != e.Index):
				more = true // written on both sides: the Leases' stays
				continue
			case err != nil && !errors.Is(err, journal.ErrExists):
				return n, true, err
			}
			switch err := from.Delete(ctx, e); {
			case errors.Is(err, journal.ErrConflict):
				more = true // changed since it was read: import it again
			case err != nil:
				return n, true, fmt.Errorf("%s imported, not removed from the old record (it may be imported again): %w", e.Key, err)
			default:
				n++
			}
		}
	}
	return n, more, nil
}
