package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// callTimeout is the provisioner's deadline for one CSI call (its --timeout).
const callTimeout = 15 * time.Second

// maxQuietAttempts bounds the attempts one actor may need once faults
// stopped (liveness).
const maxQuietAttempts = 40

// backoff is the provisioner's wait before attempt n (external-provisioner:
// exponential from 100 ms; capped lower here, at 10 s).
func backoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(n-1, 10), 10*time.Second)
}

var errForgotten = errors.New("sim: provisioner restarted and forgot the call")

// actor is a provisioner of one volume (main), a duplicate caller of the
// same volume, or a writer that is not this driver.
type actor struct {
	name   string
	kind   string // "prov", "dup", "upstream", "hand"
	idx    int
	pv     string
	c      *cluster
	calls  int
	forget chan struct{}
	// inFlight: a CSI call is running (forget applies).
	inFlight  bool
	main      *actor // of a duplicate
	done      chan struct{}
	volID     string
	quietN    int
	lastErr   error
	gid       int64  // writers: the GID they put on their access point
	stuck     string // a liveness violation, for the scheduler to report
	quietFull int    // attempts since faults stopped that found the range or file system full
	claimGone bool   // the claim is deleted (its provisioner's DeleteVolume began)
	over      bool   // it ended (s.mu; done closes just after)
}

func (s *Sim) finish(a *actor) {
	s.mu.Lock()
	s.running--
	a.over = true
	s.mu.Unlock()
	close(a.done)
}

// instanceFor picks the controller an attempt goes to: the provisioner
// talks to whichever replica leads, which changes.
func (s *Sim) instanceFor(a *actor, attempt int) *instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.c.slots[(a.idx+attempt)%len(a.c.slots)]
}

// csiCall runs f on inst as one gRPC call: its answer is lost if inst is
// killed or the provisioner forgets the call, and the call's context ends
// then (the connection closes).
func (s *Sim) csiCall(a *actor, inst *instance, f func(context.Context) (any, error)) (any, error) {
	a.calls++
	tag := &callTag{actor: a.name, call: a.calls}
	ctx, cancel := context.WithTimeout(withTag(context.Background(), tag), callTimeout)
	defer cancel()
	ch := make(chan reply, 1)
	s.mu.Lock()
	a.inFlight = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		a.inFlight = false
		s.mu.Unlock()
	}()
	s.mu.Lock()
	s.handling[tag] = true
	s.mu.Unlock()
	go func() {
		v, err := f(ctx)
		s.mu.Lock()
		delete(s.handling, tag)
		if err != nil && (strings.Contains(err.Error(), context.DeadlineExceeded.Error()) || strings.Contains(err.Error(), context.Canceled.Error()) ||
			strings.Contains(err.Error(), journal.ErrUnavailable.Error())) {
			// Its status carries the context's error as text. Or the
			// record store failed the call, its cleanup's writes too
			// (core's cleanupTries): what it made is the collector's, as
			// one whose DeleteAccessPoint failed (checkNamed); final
			// proves the collector gets it.
			s.cutShort[tag] = true
		}
		s.mu.Unlock()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		s.mu.Lock()
		dead := inst.dead
		s.mu.Unlock()
		if dead {
			// Killed in the step that answered: which case select takes
			// must not decide the run.
			return nil, errKilled
		}
		return r.v, r.err
	case <-inst.deadCh:
		return nil, errKilled
	case <-a.forget:
		return nil, errForgotten
	}
}

// attempt counts a failed attempt; false: give up (liveness broken or the
// run is stopping).
func (s *Sim) attempt(a *actor, what string, err error) bool {
	s.mu.Lock()
	quiet := s.quiet
	s.mu.Unlock()
	a.lastErr = err
	if quiet {
		a.quietN++
		if full(err) {
			a.quietFull++
		}
		if a.quietN > maxQuietAttempts {
			s.mu.Lock()
			a.stuck = fmt.Sprintf("liveness: %s %s %s never finishes once faults stopped: %d attempts, last: %v", a.name, what, a.pv, a.quietN, err)
			if a.quietFull > a.quietN/2 {
				a.stuck += fmt.Sprintf(" (%s: %d attempts)", fullRange, a.quietFull)
			}
			s.mu.Unlock()
			return false
		}
	}
	return true
}

// fullRange marks a liveness violation most of whose attempts found the
// class's range, or the file system's access points, full.
const fullRange = "mostly a full range or access point limit"

// full reports whether err says the range or the file system is full.
func full(err error) bool {
	return errors.Is(err, gid.ErrExhausted) || errors.Is(err, efs.ErrLimitExceeded) ||
		err != nil && (strings.Contains(err.Error(), gid.ErrExhausted.Error()) || strings.Contains(err.Error(), efs.ErrLimitExceeded.Error()))
}

// create calls CreateVolume until it answers; "" if the run stops first.
func (s *Sim) create(a *actor) string {
	v := a.idx
	if a.main != nil {
		v = a.main.idx
	}
	req := createReq(a.pv, s.params(v))
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff(attempt))
		}
		if attempt > 0 && !s.step(a.tag(), "retry create") {
			return ""
		}
		inst := s.instanceFor(a, attempt)
		v, err := s.csiCall(a, inst, func(ctx context.Context) (any, error) { return inst.svc.CreateVolume(ctx, req) })
		if err == nil {
			resp := v.(*csi.CreateVolumeResponse)
			id := resp.GetVolume().GetVolumeId()
			s.answer(a, inst, id)
			return id
		}
		s.mu.Lock()
		s.atracef(a, "%s CreateVolume %s via %s: %v", a.name, a.pv, inst.name, short(err))
		abandon := errors.Is(err, errForgotten) && a.kind == "prov" && a.idx < s.cfg.Abandon
		if abandon {
			// The leak no driver prevents alone: the claim was deleted
			// while its create was in flight, and the restarted
			// provisioner never heard of it. The collector's job.
			a.claimGone = true
			s.atracef(a, "%s abandons %s: its claim is deleted", a.name, a.pv)
		}
		s.mu.Unlock()
		if abandon || !s.attempt(a, "CreateVolume", err) {
			return ""
		}
	}
}

// del calls DeleteVolume until it succeeds.
func (s *Sim) del(a *actor, volID string) bool {
	req := &csi.DeleteVolumeRequest{VolumeId: volID}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff(attempt))
		}
		if attempt > 0 && !s.step(a.tag(), "retry delete") {
			return false
		}
		inst := s.instanceFor(a, attempt)
		_, err := s.csiCall(a, inst, func(ctx context.Context) (any, error) { return inst.svc.DeleteVolume(ctx, req) })
		if err == nil {
			s.mu.Lock()
			s.atracef(a, "%s DeleteVolume %s via %s: ok", a.name, volID, inst.name)
			s.deletedIDs[volID] = true
			s.mu.Unlock()
			return true
		}
		s.mu.Lock()
		s.atracef(a, "%s DeleteVolume %s via %s: %v", a.name, volID, inst.name, short(err))
		s.mu.Unlock()
		if !s.attempt(a, "DeleteVolume", err) {
			return false
		}
	}
}

// tag is a fresh tag for an actor step.
func (a *actor) tag() *callTag {
	a.calls++
	return &callTag{actor: a.name, call: a.calls}
}

func (s *Sim) answer(a *actor, inst *instance, volID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fsID, apID, dir := parseVolID(volID)
	an := &answered{volID: volID, name: a.pv, apID: apID, fsID: fsID, by: a.name, inst: inst, gid: -2} // -2: no such access point
	if dir != "" {
		s.answerDir(an, dir)
		s.atracef(a, "%s answered %s via %s: directory %s gid=%d", a.name, a.pv, inst.name, dir, an.gid)
		return
	}
	if f, ap := s.efs.find(apID); f != nil {
		an.token, an.gid = ap.ap.ClientToken, -1
		if ap.ap.PosixUser != nil {
			an.gid = ap.ap.PosixUser.GID
		}
	}
	s.answers = append(s.answers, an)
	s.atracef(a, "%s answered %s via %s: %s gid=%d", a.name, a.pv, inst.name, apID, an.gid)
}

// answerDir notes an, answered with the directory volume of dir: its GID
// is its record's, in the answering controller's store; -2 if the
// directory did not exist when answered.
func (s *Sim) answerDir(an *answered, dir string) {
	token := volume.DirToken(dir)
	an.apID, an.dir, an.token = core.DirStandInID(token), dir, token
	s.scanMounts()
	if _, ok := s.dirsOf(an.fsID)[dir]; ok {
		an.gid = -1
		if v := recordOf(an.inst.st, an.fsID, "", token, ""); v != nil {
			an.gid = v.GID
		}
	}
	s.answers = append(s.answers, an)
}

// dirsOf are the directories of file system fsID (nil if none).
func (s *Sim) dirsOf(fsID string) map[string]string {
	if f := s.efs.fss[fsID]; f != nil {
		return f.dirs
	}
	return nil
}

// runProv is the provisioner of one claim: create until answered, then,
// once the claim is deleted, delete until done.
func (s *Sim) runProv(a *actor) {
	defer s.finish(a)
	if !s.step(a.tag(), "claim "+a.pv) {
		return
	}
	id := s.create(a)
	if id == "" {
		return
	}
	a.volID = id
	if !s.step(a.tag(), "delete claim "+a.pv) {
		return
	}
	s.mu.Lock()
	s.deleteIssued[id] = true
	a.claimGone = true
	s.mu.Unlock()
	s.del(a, id)
}

// runDup is a second caller of the same volume (a provisioner during a
// leader change): it creates until answered, and once the claim's own
// provisioner is done, deletes what it was answered (the CO cleaning up).
func (s *Sim) runDup(a *actor) {
	defer s.finish(a)
	if !s.step(a.tag(), "dup claim "+a.pv) {
		return
	}
	id := s.create(a)
	if id == "" {
		return
	}
	<-a.main.done
	s.mu.Lock()
	s.deleteIssued[id] = true
	s.mu.Unlock()
	s.del(a, id)
}

// upstreamCallTimeout bounds upstream's calls in flight at the handover:
// its chart's csi-provisioner --timeout (15s), whose deadline the driver's
// requests carry. A request not sent by then never is.
const upstreamCallTimeout = 15 * time.Second

// runWriter makes an access point as upstream's driver (token = PV name,
// GID from the class range, upstream's tag) or by hand (the console's
// token, no tag) would, and deletes it later. An "upgrade" writer is
// upstream's last leader at the handover of an in-place upgrade, its
// create of volume 0's claim in flight: sent within upstreamCallTimeout
// or never, and never answered (its provisioner has gone).
func (s *Sim) runWriter(a *actor) {
	defer s.finish(a)
	ctx := context.Background()
	if a.kind == "upgrade" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, upstreamCallTimeout)
		defer cancel()
	}
	path := "/" + a.pv
	if s.cfg.Share && s.cfg.Volumes > 0 && a.kind != "upgrade" {
		path = fmt.Sprintf("/pvc-%d", a.idx%s.cfg.Volumes) // a volume's directory, shared by hand
	}
	in := efs.CreateAccessPointInput{
		FileSystemID: s.writerFS(a), Path: path,
		PosixUser: &efs.PosixUser{UID: a.gid, GID: a.gid},
	}
	if a.kind == "upstream" || a.kind == "upgrade" {
		in.ClientToken = a.pv
		in.Tags = map[string]string{ownership.TagCluster: "true", ownership.TagVolumeName: a.pv}
	} else {
		in.ClientToken = "console-" + a.pv // the console and the CLI send one; no tag
	}
	t := a.tag()
	v, err := s.park(withTag(ctx, t), nil, kindActor, fmt.Sprintf("%s creates %s gid=%d", a.kind, a.pv, a.gid), func() (any, error) {
		return s.efs.create(in, a.kind, false)
	})
	if err != nil {
		return
	}
	made := v.(*efs.AccessPoint)
	id := made.ID
	if a.kind == "upgrade" {
		return // the claim's volume now: its DeleteVolume deletes it
	}
	if a.idx < s.cfg.Forge {
		// Anyone who may write Leases in the controller's namespace
		// writes a record naming this access point, for a claim that never
		// existed; the access point stays.
		s.forge(a, made)
		return
	}
	if a.kind == "hand" && s.cfg.RootDir && a.idx%4 == 1 && !s.alwaysDown(made.FileSystemID) {
		// A PersistentVolume made by hand for this access point, with
		// reclaim policy Delete: DeleteVolume deletes it, and with root
		// removal on keeps its directory (no CSI driver made it), which
		// the deleting controller counts (checkKeptRoots).
		a.c, a.forget = s.clusters[0], make(chan struct{}, 1)
		volID := volume.ProvisionedID(made.FileSystemID, id)
		s.mu.Lock()
		s.deleteIssued[volID] = true
		s.handVolumes = append(s.handVolumes, handVolume{volID: volID, apID: id, path: made.Path, fsID: made.FileSystemID})
		s.mu.Unlock()
		s.del(a, volID)
		return
	}
	t = a.tag()
	s.park(withTag(context.Background(), t), nil, kindActor, a.kind+" deletes "+id, func() (any, error) {
		return nil, s.efs.delete(id)
	})
}

// writerFS is the file system a writer makes its access point on: of the
// class's, one after the other (an upgrade's on FS, as upstream's bound
// volume).
func (s *Sim) writerFS(a *actor) string {
	if a.kind == "upgrade" {
		return FS
	}
	return fsID(a.idx % s.cfg.fileSystems())
}

// forge writes a record entry (and its id entry) naming ap into the record
// of cluster 0's first controller, as if this driver had made it.
func (s *Sim) forge(a *actor, ap *efs.AccessPoint) {
	token := ap.ClientToken
	if token == "" {
		token = "forged-" + a.pv
	}
	v := journal.Volume{FileSystem: ap.FileSystemID, Token: token, Name: a.pv, Path: ap.Path, UID: a.gid, GID: a.gid, Allocated: a.gid,
		AccessPoint: ap.ID, Recorded: time.Now().UTC(), ClaimNamespace: "default", ClaimName: "ghost-" + a.pv, Created: time.Now().UTC()}
	b, err := json.Marshal(&v)
	if err != nil {
		panic(err)
	}
	st := s.clusters[0].slots[0].st
	s.park(withTag(context.Background(), a.tag()), nil, kindActor, "forge record of "+ap.ID+" in "+st.name, func() (any, error) {
		vk := journal.Key{Kind: journal.KindVolume, FileSystem: ap.FileSystemID, Name: token}
		ik := journal.Key{Kind: journal.KindID, FileSystem: ap.FileSystemID, Name: strconv.FormatInt(a.gid, 10)}
		st.create(journal.Entry{Key: vk, Value: b, Index: ap.ID})
		st.create(journal.Entry{Key: ik, Value: []byte(token)})
		s.forged[vk], s.forged[ik] = true, true
		return nil, nil
	})
}

// plantUpstream makes, before any controller acts, an access point as
// upstream's driver made it for a claim that stays bound (its PV name as
// token and root directory, its tags, GID gid): a volume of the cluster
// being upgraded. Its GID is live for the whole run (checkUpstream).
func (s *Sim) plantUpstream(pv string, gid int64) {
	in := efs.CreateAccessPointInput{FileSystemID: FS, ClientToken: pv, Path: "/" + pv,
		PosixUser: &efs.PosixUser{UID: gid, GID: gid},
		Tags:      map[string]string{ownership.TagCluster: "true", ownership.TagVolumeName: pv}}
	ap, err := s.efs.create(in, "upstream", false)
	if err != nil {
		panic(err)
	}
	made := s.efs.fss[FS].aps[ap.ID]
	made.listAt, made.describeAt = time.Time{}, time.Time{} // made long before: listed
	s.upstreamLive = append(s.upstreamLive, ap.ID)
}

// lowestFreeGID is the GID upstream's allocator picks now: the lowest of
// the class's range that no access point carries.
func (s *Sim) lowestFreeGID() int64 {
	used := map[int64]bool{}
	for _, a := range s.efs.fss[FS].aps {
		if a.ap.PosixUser != nil {
			used[a.ap.PosixUser.GID] = true
		}
	}
	g := int64(GIDStart)
	for used[g] && g < GIDStart+int64(s.cfg.GIDs+s.extraIDs) {
		g++
	}
	return g
}
