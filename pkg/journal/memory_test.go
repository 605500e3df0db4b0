package journal_test

import (
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
)

func TestMemoryConformance(t *testing.T) {
	journaltest.Conformance(t, func(*testing.T) journal.Store { return journal.NewMemory() })
}
