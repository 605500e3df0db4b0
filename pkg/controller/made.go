package controller

import (
	"container/list"
	"maps"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// madeCap bounds the access points a backend remembers making: about
// 0.5 KB each. One forgotten (the oldest first) is described again.
const madeCap = 4096

// madeAPs is what this backend's CreateAccessPoint answered of the access
// points it made and has not deleted since: the description a delete's
// LookUp takes instead of a DescribeAccessPoint, without root removal
// (docs/design.md, Delete step 3). An access point's file system, client
// token, root directory and POSIX user are fixed for its life. What may
// change behind this process's back is its tags (by hand) and whether it
// exists: the delete's own steps handle a deleted one as they handle a
// Describe that raced its deletion (the record read by key and proven by
// the mark's compare-and-swap; DeleteAccessPoint's "not found" is
// success), and a forged tag changes nothing of an access point this
// backend made for the record. Per backend: another backend's credentials
// may not see the file system at all, which only Describe, then
// Reachable, proves.
type madeAPs struct {
	mu   sync.Mutex
	byID map[string]*list.Element // of order; Value: *efs.AccessPoint
	// order: oldest first, for forgetting past madeCap.
	order list.List
}

func newMadeAPs() *madeAPs { return &madeAPs{byID: map[string]*list.Element{}} }

// add remembers ap, as CreateAccessPoint answered it. An answer without
// its file system or client token (EFS sends both) is not remembered: a
// delete finds the record by the token, so it describes that one.
func (m *madeAPs) add(ap *efs.AccessPoint) {
	if ap == nil || ap.ID == "" || ap.FileSystemID == "" || ap.ClientToken == "" {
		return
	}
	cp := *ap
	cp.Tags = maps.Clone(ap.Tags)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byID[ap.ID]; ok {
		e.Value = &cp
		m.order.MoveToBack(e)
		return
	}
	m.byID[ap.ID] = m.order.PushBack(&cp)
	for m.order.Len() > madeCap {
		oldest := m.order.Front()
		m.order.Remove(oldest)
		delete(m.byID, oldest.Value.(*efs.AccessPoint).ID)
	}
}

// get is the access point id as made (a copy), if remembered.
func (m *madeAPs) get(id string) (*efs.AccessPoint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return nil, false
	}
	cp := *e.Value.(*efs.AccessPoint)
	cp.Tags = maps.Clone(cp.Tags)
	return &cp, true
}

// drop forgets id: deleted.
func (m *madeAPs) drop(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byID[id]; ok {
		m.order.Remove(e)
		delete(m.byID, id)
	}
}

// len is how many are remembered.
func (m *madeAPs) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}
