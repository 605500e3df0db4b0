package controller

import (
	"context"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/rootpath"
)

// rootView is what root removal checks a directory against: a listing of the
// file system that started after the delete asked, and the record's volumes
// read after that listing (the creates of this cluster that the listing may
// not show yet: a record is written before its CreateAccessPoint). It is
// built once for every delete waiting when its listing starts and shared
// by them; none modifies it.
type rootView struct {
	began time.Time // when its listing began
	byID  map[string]*efs.AccessPoint
	index rootpath.Sorted
}

// newView lists fsID through client, then reads the record, and indexes
// both by root directory.
func newView(ctx context.Context, client EFS, j *journal.Journal, fsID string, began time.Time) (*rootView, error) {
	aps, err := efs.Collect(ctx, client.ListAccessPoints, fsID)
	if err != nil {
		return nil, err
	}
	v := &rootView{began: began, byID: make(map[string]*efs.AccessPoint, len(aps))}
	hs := make([]rootpath.Holder, 0, 2*len(aps))
	for i := range aps {
		ap := &aps[i]
		v.byID[ap.ID] = ap
		hs = append(hs, rootpath.Holder{APID: ap.ID, Path: ap.Path, Kind: rootpath.Listed, Live: core.Live(ap)})
	}
	err = j.Volumes(ctx, fsID, func(recs []*journal.Record) error {
		for _, r := range recs {
			hs = append(hs, rootpath.Holder{APID: r.AccessPoint, Token: r.Token, Name: r.Name, Path: r.Path, Kind: rootpath.Recorded, Live: true})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	v.index = rootpath.NewSorted(hs)
	return v, nil
}

// accessPoint is the listed access point apID (a copy), or nil.
func (v *rootView) accessPoint(apID string) *efs.AccessPoint {
	ap, ok := v.byID[apID]
	if !ok {
		return nil
	}
	c := *ap
	return &c
}
