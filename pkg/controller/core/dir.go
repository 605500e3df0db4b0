package core

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Directory volumes (provisioningMode efs-dir; docs/directory-volumes.md;
// the step tables in docs/design.md, "Directory volumes"): a directory on
// the file system, made by the controller through its mount of it, recorded
// as an access point volume is, with no access point. Their effects,
// besides the record's and Lock, Mark, RemoveRoot and
// Finish.
type (
	// MakeDir makes Record's directory, mode Perms, owned by its ids;
	// an existing one is used as it is (Result.Yes: this call made it;
	// Result.Err: the record stays, a retry makes it).
	MakeDir struct {
		Record *journal.Record
		Perms  string
	}
	// UnmakeDir removes Record's directory, which this call made and
	// nobody answered, if it is empty (Result.Err).
	UnmakeDir struct{ Record *journal.Record }
	// SetDirMade records the directory made: a compare-and-swap that
	// confirms the record (journal.SetDirMade; Result.Err,
	// journal.ErrDeleting once a delete marked it).
	SetDirMade struct{ Record *journal.Record }
)

func (MakeDir) effect()    {}
func (UnmakeDir) effect()  {}
func (SetDirMade) effect() {}

// DirStandIn is the access point a directory volume stands for where
// access points are counted: in the allocator (its ids), root removal's
// indexes (its path; the token tells its own record apart), the removal
// itself. Its ID (DirStandInID) is no EFS ID.
func DirStandIn(rec *journal.Record) *efs.AccessPoint {
	return &efs.AccessPoint{
		ID: DirStandInID(rec.Token), FileSystemID: rec.FileSystem, Path: rec.Path, ClientToken: rec.Token,
		PosixUser: &efs.PosixUser{UID: rec.UID, GID: rec.GID},
	}
}

// DirStandInID is the stand-in ID of the directory volume of token.
func DirStandInID(token string) string { return "dir:" + token }

// createDir is a directory volume's create, under the name locks (the
// name's and the path's token's): the record and its id first (Begin, or
// Touch of an existing one, then HoldID, as for access points), then the
// directory, then SetDirMade, then the answer (Answer.Record). A delete
// that marked the record before SetDirMade makes it fail: the directory
// this call made (nobody answered it) is removed again and the call is
// ABORTED. One that marks it after removes the directory after it was
// made. With root removal on, this process's deletes see the create from
// before its record is written (FS.Creating) until its end.
func (c *Create) createDir() Answer {
	p := c.p
	if c.cfg.DeleteRootDir {
		c.mem.Creating(p.Input.ClientToken, p.Name, p.Input.Path)
	}
	a := c.dirProtocol()
	c.release()
	if c.cfg.DeleteRootDir {
		var made *efs.AccessPoint
		if a.Err == nil {
			made = DirStandIn(a.Record)
		}
		c.mem.CreateEnded(p.Input.ClientToken, made, c.now)
	}
	return a
}

// dirProtocol is the record and its id, then the directory.
func (c *Create) dirProtocol() Answer {
	if err := c.record(); err != nil {
		return Answer{Err: err}
	}
	rec := c.rec
	if why := c.p.dirMismatch(rec); why != "" {
		return Answer{Err: fmt.Errorf("%w: volume %q: %s", ErrIncompatible, c.p.Name, why)}
	}
	// Before the reservation goes (the call's end): this process's
	// allocator keeps every create off the id until the delete's FS.Gone.
	c.mem.Seen(*DirStandIn(rec), c.now)
	c.mem.AddOutside(rec.UID, rec.GID) // access point creates skip them: carried outside the GID token protocol
	return c.makeDir(rec)
}

// makeDir makes rec's directory and confirms the record.
func (c *Create) makeDir(rec *journal.Record) Answer {
	r := c.do(MakeDir{Record: rec, Perms: c.p.Params.DirectoryPerms})
	if r.Err != nil {
		return Answer{Err: r.Err}
	}
	made := r.Yes
	r = c.do(SetDirMade{Record: rec})
	switch {
	case r.Err == nil:
		return Answer{Record: rec}
	case !errors.Is(r.Err, journal.ErrDeleting):
		return Answer{Err: r.Err}
	case !made:
		return Answer{Err: fmt.Errorf("%w: %w", keylock.ErrBusy, r.Err)}
	}
	// Marked deleting (or finished) since this call read the record:
	// nobody can answer the volume any more.
	why := r.Err
	r = c.do(UnmakeDir{Record: rec})
	return Answer{Err: fmt.Errorf("%w: %w", keylock.ErrBusy, join(why, r.Err))}
}

// dirMismatch says why rec, the record of p's path, serves another
// volume than p describes, or "". Its name is checked by record.
func (p *Plan) dirMismatch(rec *journal.Record) string {
	switch {
	case !rec.Dir:
		return fmt.Sprintf("its path %s is recorded for an access point volume", rec.Path)
	case rec.Path != p.Input.Path:
		return fmt.Sprintf("directory %q, want %q", rec.Path, p.Input.Path)
	case rec.Capacity != p.Capacity:
		return fmt.Sprintf("capacity %d bytes, want %d", rec.Capacity, p.Capacity)
	case p.Params.UID >= 0 && rec.UID != p.Params.UID:
		return fmt.Sprintf("uid %d, want %d", rec.UID, p.Params.UID)
	case p.Params.GID >= 0 && rec.GID != p.Params.GID:
		return fmt.Sprintf("gid %d, want %d", rec.GID, p.Params.GID)
	case p.Params.NeedsGIDAllocation() && (rec.Allocated < p.Params.GIDRangeStart || rec.Allocated > p.Params.GIDRangeEnd):
		return fmt.Sprintf("allocated id %d outside [%d, %d]", rec.Allocated, p.Params.GIDRangeStart, p.Params.GIDRangeEnd)
	}
	return ""
}

// deleteDir is a directory volume's delete: only one the record names
// (the ID's path's token, a directory volume at that path); anything else
// is answered OK with nothing removed, as a static volume is. Under the
// record's name locks: Mark, then with root removal the directory's
// removal under root removal's rules (RemoveRoot: never one another
// listed access point or recorded volume reaches, after the listing lag),
// then FS.Gone and Finish (id, then record).
//
// A repeat is not answered from this process's finished deletes (FS.DeleteFinished),
// as an access point volume's is: every life of a directory volume has the
// same ID (its path), so a delete finished here says nothing of a later
// life that another replica made (the simulator's wide seed 568: a
// duplicate create's new life, deleted through the replica that had
// deleted the first, was answered from memory, and its record, id and
// directory were left). The record read it costs instead is all a repeat
// costs: no EFS request.
func (d *Delete) deleteDir(id volume.ID) error {
	read := ReadRecord{FileSystem: id.FileSystemID, Key: volume.DirToken(id.Path)}
	rec, err := d.dirRecord(id, read)
	if rec == nil || err != nil {
		return err
	}
	locks := RecordLocks(rec)
	if r := d.do(Lock{Keys: locks}); r.Err != nil {
		return r.Err
	}
	// Read again under the locks: a create that held them may have
	// changed it, or a delete finished it.
	if rec, err = d.dirRecord(id, read); rec == nil || err != nil {
		return err
	}
	if r := d.do(Mark{Record: rec}); r.Err != nil {
		return r.Err
	}
	if !d.cfg.DeleteRootDir {
		d.logAttrs(slog.LevelInfo, "directory kept: --delete-access-point-root-dir is off", slog.String("volumeID", d.raw))
	} else {
		since := d.began
		if !rec.DeletingSince.IsZero() && rec.DeletingSince.Before(since) {
			since = rec.DeletingSince // an earlier attempt's, before a restart too
		}
		prov := Provenance{Recorded: true, CSI: true, VolumeName: rec.Name, Locks: locks}
		if r := d.do(RemoveRoot{AP: DirStandIn(rec), Prov: prov, Since: since}); r.Err != nil {
			return r.Err
		}
	}
	d.mem.Gone(DirStandInID(rec.Token), d.now) // this process's allocator and root removal forget the stand-in
	if r := d.do(Finish{Record: rec}); r.Err != nil {
		return r.Err
	}
	d.logAttrs(slog.LevelInfo, "directory volume deleted",
		slog.String("volumeID", d.raw), slog.Bool("directoryRemoved", d.cfg.DeleteRootDir))
	return nil
}

// dirRecord reads the record of id's path: nil if it is not this directory
// volume's (the delete is then done), or the read's error.
func (d *Delete) dirRecord(id volume.ID, read ReadRecord) (*journal.Record, error) {
	r := d.do(read)
	switch {
	case errors.Is(r.Err, journal.ErrNotFound):
		return nil, nil // never made, or deleted: nothing recorded, nothing removed
	case r.Err != nil:
		return nil, r.Err
	case !r.Record.Dir || r.Record.Path != id.Path:
		d.logAttrs(slog.LevelWarn, "volume not deleted: the record at its path is not this directory volume",
			slog.String("volumeID", d.raw), slog.String("recorded", r.Record.Path))
		return nil, nil
	}
	return r.Record, nil
}
