package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

const (
	apiPrefix    = "/2015-02-01"
	maxBodyBytes = 1 << 20
)

// request is a decoded and validated request: in is what a Hook sees, run
// applies it and returns the success status and body.
type request struct {
	in any
	// resource is the file system, access point or mount target (an ID) the
	// caller's account must own, when accounts are on; "" for none.
	resource string
	// iam is what IAM evaluation needs beyond op and resource (iam.go).
	iam iamFacts
	run func() (status int, body any, err *apiError)
}

// protocol writes a service's answers: EFS's JSON or STS's XML.
type protocol struct {
	writeError func(http.ResponseWriter, *apiError)
	writeOK    func(w http.ResponseWriter, status int, body any)
}

var efsProtocol = protocol{writeError: writeError, writeOK: writeJSON}

// decoder parses and validates one operation's HTTP request.
type decoder func(r *http.Request) (request, *apiError)

func (e *Emulator) routes() *http.ServeMux {
	mux := http.NewServeMux()
	api := func(pattern string, op Op, d decoder) { mux.Handle(pattern, e.endpoint(op, d)) }
	api("POST "+apiPrefix+"/access-points", OpCreateAccessPoint, e.decodeCreateAccessPoint)
	api("GET "+apiPrefix+"/access-points", OpDescribeAccessPoints, e.decodeDescribeAccessPoints)
	api("DELETE "+apiPrefix+"/access-points/{id}", OpDeleteAccessPoint, deleteByID("AccessPointId", "fsap", efsOnly(e.state.deleteAccessPoint),
		func(id string) any { return &DeleteAccessPointInput{AccessPointId: id} }))
	api("POST "+apiPrefix+"/file-systems", OpCreateFileSystem, e.decodeCreateFileSystem)
	api("GET "+apiPrefix+"/file-systems", OpDescribeFileSystems, e.decodeDescribeFileSystems)
	api("DELETE "+apiPrefix+"/file-systems/{id}", OpDeleteFileSystem, deleteByID("FileSystemId", "fs", efsOnly(e.state.deleteFileSystem),
		func(id string) any { return &DeleteFileSystemInput{FileSystemId: id} }))
	api("POST "+apiPrefix+"/mount-targets", OpCreateMountTarget, e.decodeCreateMountTarget)
	api("GET "+apiPrefix+"/mount-targets", OpDescribeMountTargets, e.decodeDescribeMountTargets)
	api("DELETE "+apiPrefix+"/mount-targets/{id}", OpDeleteMountTarget, deleteByID("MountTargetId", "fsmt", efsOnly(e.state.deleteMountTarget),
		func(id string) any { return &DeleteMountTargetInput{MountTargetId: id} }))
	api("POST "+apiPrefix+"/resource-tags/{id}", OpTagResource, e.decodeTagResource)
	api("DELETE "+apiPrefix+"/resource-tags/{id}", OpUntagResource, e.decodeUntagResource)
	api("GET "+apiPrefix+"/resource-tags/{id}", OpListTagsForResource, e.decodeListTagsForResource)
	e.s3Routes(mux)
	e.controlRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if isSTS(r) {
			e.serveSTS(w, r)
			return
		}
		rec := &recorder{ResponseWriter: w}
		writeError(rec, errorf(http.StatusNotFound, codeUnknownOperation, "no operation %s %s", r.Method, r.URL.Path))
		e.logRequest(r, "", rec, time.Now(), "")
	})
	return mux
}

// recorder remembers the status and error code for the request log line.
type recorder struct {
	http.ResponseWriter
	status int
	// denied is the IAM action a policy denied, for the log line.
	denied string
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (e *Emulator) logRequest(r *http.Request, op Op, rec *recorder, start time.Time, fault string) {
	attrs := []any{"op", op, "method", r.Method, "path", r.URL.Path, "status", rec.status,
		"dur", time.Since(start).Round(time.Microsecond)}
	if r.URL.RawQuery != "" {
		attrs = append(attrs, "query", r.URL.RawQuery)
	}
	if code := rec.Header().Get("x-amzn-ErrorType"); code != "" {
		attrs = append(attrs, "error", code)
	}
	if fault != "" {
		attrs = append(attrs, "fault", fault)
	}
	if rec.denied != "" {
		attrs = append(attrs, "deniedAction", rec.denied)
	}
	e.log.Info("request", attrs...)
}

// endpoint serves one EFS operation.
func (e *Emulator) endpoint(op Op, decode decoder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.serveOp(w, r, op, efsProtocol, decode) })
}

// serveOp serves one operation: count, faults, identify the caller, decode,
// authorize, hooks, apply, answer.
func (e *Emulator) serveOp(w http.ResponseWriter, r *http.Request, op Op, p protocol, decode decoder) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	if want, svc := signingService(op), signingServiceOf(r); svc != "" && want != "" && svc != want {
		// Signed for another API (a client pointed at the wrong path):
		// not this operation, and not counted as one.
		p.writeError(rec, errorf(http.StatusBadRequest, codeBadRequest,
			"request signed for service %q reached %s, which is signed for %q", svc, op, want))
		e.logRequest(r, op, rec, start, "")
		return
	}
	e.counts[op].Add(1)
	rec.Header().Set("x-amzn-RequestId", e.rand.hex(8)+"-"+e.rand.hex(4)+"-"+e.rand.hex(4)+"-"+e.rand.hex(4)+"-"+e.rand.hex(12))
	fault := e.serve(r.Context(), op, p, decode, rec, r)
	e.logRequest(r, op, rec, start, fault)
}

// serve answers one API request and names the fault that struck, if any.
func (e *Emulator) serve(ctx context.Context, op Op, p protocol, decode decoder, w *recorder, r *http.Request) string {
	writeError := p.writeError
	f := e.faults.get(op)
	if f != nil {
		if d := f.Latency + e.rand.duration(f.Jitter); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "latency (client gone)"
			}
		}
		// A random throttle strikes first, so that it takes no token.
		if e.rand.chance(f.RandomThrottleRate) {
			writeError(w, throttled())
			return "random throttle"
		}
		if f.bucket != nil && !f.bucket.Allow() {
			writeError(w, throttled())
			return "throttle"
		}
		if e.rand.chance(f.ErrorRate) {
			writeError(w, errorf(http.StatusInternalServerError, codeInternal, "injected internal error (not applied)"))
			return "error"
		}
	}
	who, aerr := e.identify(r)
	if aerr != nil {
		writeError(w, aerr)
		return ""
	}
	r = r.WithContext(withCaller(ctx, who))
	req, aerr := decode(r)
	if aerr == nil {
		aerr = e.authorize(who, op, req.resource)
	}
	if aerr == nil {
		w.denied, aerr = e.authorizeIAM(who, op, &req)
	}
	if aerr != nil {
		writeError(w, aerr)
		return ""
	}
	e.callHook(op, BeforeApply, req.in)
	status, body, aerr := req.run()
	if aerr != nil {
		writeError(w, aerr)
		return ""
	}
	e.callHook(op, AfterApply, req.in)
	if f != nil && e.rand.chance(f.LostAnswerRate) {
		return e.loseAnswer(w, p, f.LostAnswerMode)
	}
	p.writeOK(w, status, body)
	return ""
}

// throttled is the answer of every throttle, token bucket or random.
func throttled() *apiError {
	return errorf(http.StatusTooManyRequests, codeThrottling, "Rate exceeded")
}

// loseAnswer fails a request that was applied: a 500, or a connection closed
// without an answer.
func (e *Emulator) loseAnswer(w *recorder, p protocol, mode LostMode) string {
	if mode == LostMixed {
		mode = Lost500
		if e.rand.chance(0.5) {
			mode = LostDrop
		}
	}
	if mode == LostDrop {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // reset: the client must not mistake it for a clean end
			}
			_ = conn.Close()
			return "lost answer (connection dropped)"
		}
	}
	p.writeError(w, errorf(http.StatusInternalServerError, codeInternal, "injected internal error (applied, answer lost)"))
	return "lost answer (500)"
}

// ---- decoding helpers ----

// efsOnly binds a state operation to the EFS API.
func efsOnly(f func(service, string) *apiError) func(string) *apiError {
	return func(id string) *apiError { return f(svcEFS, id) }
}

// deleteByID decodes DELETE .../{id} of a kind of resource; input wraps the
// ID as the operation's *Input for hooks.
func deleteByID(field, kind string, del func(id string) *apiError, input func(id string) any) decoder {
	return func(r *http.Request) (request, *apiError) {
		raw := r.PathValue("id")
		id, aerr := resourceID(field, raw, kind)
		if aerr != nil {
			return request{}, aerr
		}
		return request{in: input(raw), resource: id, run: func() (int, any, *apiError) {
			return http.StatusNoContent, nil, del(id)
		}}, nil
	}
}

func decodeBody(r *http.Request, v any) *apiError {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return badRequest("request body exceeds %d bytes", maxBodyBytes)
		}
		return badRequest("reading request body: %v", err)
	}
	if len(b) == 0 {
		b = []byte("{}")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest("malformed request body: %v", err)
	}
	return nil
}

func parseQuery(r *http.Request) (url.Values, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("malformed query string: %v", err)
	}
	return q, nil
}

// queryInt reads an optional integer parameter between 1 and max; absent is 0.
func queryInt(q url.Values, name string, max int) (int, *apiError) {
	s, ok := q[name]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(s[0])
	if err != nil || n < 1 || n > max {
		return 0, badRequest("%s must be an integer between 1 and %d, got %q", name, max, s[0])
	}
	return n, nil
}

func orDefault(n int) int {
	if n == 0 {
		return defaultPageSize
	}
	return n
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ---- access points ----

func (e *Emulator) decodeCreateAccessPoint(r *http.Request) (request, *apiError) {
	in := new(CreateAccessPointInput)
	if e := decodeBody(r, in); e != nil {
		return request{}, e
	}
	n, aerr := validateCreateAccessPoint(in)
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: n.fsID, iam: iamFacts{tags: n.tags, createAction: "CreateAccessPoint"}, run: func() (int, any, *apiError) {
		opt := createOptions{limit: e.cfg.AccessPointLimit, lenient: e.cfg.LenientClientToken}
		if f := e.faults.get(OpCreateAccessPoint); f != nil && f.VisibilityDelay > 0 {
			opt.visibleAt = time.Now().Add(f.VisibilityDelay)
		}
		ap, aerr := e.state.createAccessPoint(n, opt)
		return http.StatusOK, ap, aerr
	}}, nil
}

func validateCreateAccessPoint(in *CreateAccessPointInput) (*newAccessPoint, *apiError) {
	if in.ClientToken == nil {
		return nil, badRequest("ClientToken is required")
	}
	if e := validateToken("ClientToken", *in.ClientToken); e != nil {
		return nil, e
	}
	fsID, e := resourceID("FileSystemId", str(in.FileSystemId), "fs")
	if e != nil {
		return nil, e
	}
	n := &newAccessPoint{fsID: fsID, token: *in.ClientToken, path: "/"}
	if rd := in.RootDirectory; rd != nil {
		if rd.Path != nil {
			n.path = *rd.Path
		}
		if e := validatePath(n.path); e != nil {
			return nil, e
		}
		if e := validateCreationInfo(rd.CreationInfo); e != nil {
			return nil, e
		}
		if ci := rd.CreationInfo; ci != nil {
			n.ci = &creationInfo{OwnerUid: *ci.OwnerUid, OwnerGid: *ci.OwnerGid, Permissions: *ci.Permissions}
		}
	}
	if e := validatePosixUser(in.PosixUser); e != nil {
		return nil, e
	}
	if pu := in.PosixUser; pu != nil {
		n.pu = &wirePosixUser{Uid: *pu.Uid, Gid: *pu.Gid, SecondaryGids: pu.SecondaryGids}
	}
	if n.tags, e = validateTags(in.Tags); e != nil {
		return nil, e
	}
	n.params = canonicalParams(n)
	return n, nil
}

func (e *Emulator) decodeDescribeAccessPoints(r *http.Request) (request, *apiError) {
	q, aerr := parseQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	in := &DescribeAccessPointsInput{AccessPointId: q.Get("AccessPointId"), FileSystemId: q.Get("FileSystemId"), NextToken: q.Get("NextToken")}
	if in.MaxResults, aerr = queryInt(q, "MaxResults", maxAccessPointsPage); aerr != nil {
		return request{}, aerr
	}
	switch {
	case (in.AccessPointId == "") == (in.FileSystemId == ""):
		return request{}, badRequest("give exactly one of AccessPointId and FileSystemId")
	case in.AccessPointId != "":
		id, aerr := resourceID("AccessPointId", in.AccessPointId, "fsap")
		if aerr != nil {
			return request{}, aerr
		}
		return request{in: in, resource: id, run: func() (int, any, *apiError) {
			ap, aerr := e.state.describeAccessPoint(svcEFS, id, time.Now())
			return http.StatusOK, describeAccessPointsOutput{AccessPoints: []wireAccessPoint{ap}}, aerr
		}}, nil
	}
	id, aerr := resourceID("FileSystemId", in.FileSystemId, "fs")
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: id, run: func() (int, any, *apiError) {
		out, aerr := e.state.listAccessPoints(id, in.NextToken, orDefault(in.MaxResults), time.Now())
		return http.StatusOK, out, aerr
	}}, nil
}

// ---- file systems ----

func (e *Emulator) decodeCreateFileSystem(r *http.Request) (request, *apiError) {
	in := new(CreateFileSystemInput)
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	if in.CreationToken == nil {
		return request{}, badRequest("CreationToken is required")
	}
	if aerr := validateToken("CreationToken", *in.CreationToken); aerr != nil {
		return request{}, aerr
	}
	rec := fileSystemRec{
		CreationToken: *in.CreationToken, PerformanceMode: defaultPerformanceMode, ThroughputMode: defaultThroughputMode,
		ProvisionedMiBs: in.ProvisionedThroughputInMibps, Encrypted: in.Encrypted != nil && *in.Encrypted,
		KmsKeyID: str(in.KmsKeyId), AZName: str(in.AvailabilityZoneName),
		Owner: ownerField(callerFrom(r.Context()).account),
	}
	if z := rec.AZName; z != "" {
		if !ValidZone(z) {
			return request{}, badRequest("AvailabilityZoneName %.64q is not an availability zone of %s", z, region)
		}
	}
	if p := str(in.PerformanceMode); p != "" {
		if p != "generalPurpose" && p != "maxIO" {
			return request{}, badRequest("PerformanceMode %q: want generalPurpose or maxIO", p)
		}
		rec.PerformanceMode = p
	}
	if t := str(in.ThroughputMode); t != "" {
		if t != "bursting" && t != "provisioned" && t != "elastic" {
			return request{}, badRequest("ThroughputMode %q: want bursting, provisioned or elastic", t)
		}
		rec.ThroughputMode = t
	}
	if (rec.ThroughputMode == "provisioned") != (rec.ProvisionedMiBs != nil) {
		return request{}, badRequest("ProvisionedThroughputInMibps is required with, and only with, ThroughputMode provisioned")
	}
	if p := rec.ProvisionedMiBs; p != nil && !(*p >= 1) {
		return request{}, badRequest("ProvisionedThroughputInMibps must be at least 1")
	}
	var aerr *apiError
	if rec.Tags, aerr = validateTags(in.Tags); aerr != nil {
		return request{}, aerr
	}
	return request{in: in, iam: iamFacts{tags: rec.Tags, createAction: "CreateFileSystem"}, run: func() (int, any, *apiError) {
		fs, aerr := e.state.createFileSystem(rec, false)
		return http.StatusCreated, fs, aerr
	}}, nil
}

func (e *Emulator) decodeDescribeFileSystems(r *http.Request) (request, *apiError) {
	q, aerr := parseQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	in := &DescribeFileSystemsInput{FileSystemId: q.Get("FileSystemId"), CreationToken: q.Get("CreationToken"), Marker: q.Get("Marker")}
	if in.MaxItems, aerr = queryInt(q, "MaxItems", maxDescribeItems); aerr != nil {
		return request{}, aerr
	}
	if in.FileSystemId != "" {
		if in.FileSystemId, aerr = resourceID("FileSystemId", in.FileSystemId, "fs"); aerr != nil {
			return request{}, aerr
		}
	}
	if in.CreationToken != "" {
		if aerr := validateToken("CreationToken", in.CreationToken); aerr != nil {
			return request{}, aerr
		}
	}
	account := callerFrom(r.Context()).account
	return request{in: in, resource: in.FileSystemId, run: func() (int, any, *apiError) {
		out, aerr := e.state.describeFileSystems(in, orDefault(in.MaxItems), account)
		return http.StatusOK, out, aerr
	}}, nil
}

// ---- mount targets ----

func (e *Emulator) decodeCreateMountTarget(r *http.Request) (request, *apiError) {
	in := new(CreateMountTargetInput)
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	fsID, subnet, ip, aerr := validateCreateMountTarget(in)
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: fsID, run: func() (int, any, *apiError) {
		mt, aerr := e.state.createMountTarget(svcEFS, fsID, subnet, ip)
		return http.StatusOK, mt, aerr
	}}, nil
}

func validateCreateMountTarget(in *CreateMountTargetInput) (fsID, subnet, ip string, aerr *apiError) {
	if fsID, aerr = resourceID("FileSystemId", str(in.FileSystemId), "fs"); aerr != nil {
		return "", "", "", aerr
	}
	if subnet, aerr = resourceID("SubnetId", str(in.SubnetId), "subnet"); aerr != nil {
		return "", "", "", aerr
	}
	if ip = str(in.IpAddress); ip != "" {
		if a := net.ParseIP(ip); a == nil || a.To4() == nil {
			return "", "", "", badRequest("IpAddress %q is not an IPv4 address", ip)
		}
	}
	return fsID, subnet, ip, nil
}

func (e *Emulator) decodeDescribeMountTargets(r *http.Request) (request, *apiError) {
	q, aerr := parseQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	in := &DescribeMountTargetsInput{FileSystemId: q.Get("FileSystemId"), MountTargetId: q.Get("MountTargetId"),
		AccessPointId: q.Get("AccessPointId"), Marker: q.Get("Marker")}
	if in.MaxItems, aerr = queryInt(q, "MaxItems", maxDescribeItems); aerr != nil {
		return request{}, aerr
	}
	given := 0
	for _, f := range []struct {
		name, kind string
		v          *string
	}{{"FileSystemId", "fs", &in.FileSystemId}, {"MountTargetId", "fsmt", &in.MountTargetId}, {"AccessPointId", "fsap", &in.AccessPointId}} {
		if *f.v == "" {
			continue
		}
		given++
		if *f.v, aerr = resourceID(f.name, *f.v, f.kind); aerr != nil {
			return request{}, aerr
		}
	}
	if given != 1 {
		return request{}, badRequest("give exactly one of FileSystemId, MountTargetId and AccessPointId")
	}
	return request{in: in, resource: in.FileSystemId + in.MountTargetId + in.AccessPointId, run: func() (int, any, *apiError) {
		out, aerr := e.state.describeMountTargets(svcEFS, in, orDefault(in.MaxItems), time.Now())
		return http.StatusOK, out, aerr
	}}, nil
}

// ---- tags ----

func taggableID(r *http.Request) (string, *apiError) {
	return resourceID("ResourceId", r.PathValue("id"), "fs", "fsap")
}

func taggableIDAndQuery(r *http.Request) (string, url.Values, *apiError) {
	id, aerr := taggableID(r)
	if aerr != nil {
		return "", nil, aerr
	}
	q, aerr := parseQuery(r)
	return id, q, aerr
}

func (e *Emulator) decodeTagResource(r *http.Request) (request, *apiError) {
	id, aerr := taggableID(r)
	if aerr != nil {
		return request{}, aerr
	}
	in := &TagResourceInput{ResourceId: id}
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	if len(in.Tags) == 0 {
		return request{}, badRequest("Tags is required")
	}
	add, aerr := validateTags(in.Tags)
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: id, iam: iamFacts{tags: add}, run: func() (int, any, *apiError) {
		return http.StatusOK, nil, e.state.updateTags(svcEFS, id, func(old []tag) ([]tag, *apiError) { return mergeTags(old, add) })
	}}, nil
}

func (e *Emulator) decodeUntagResource(r *http.Request) (request, *apiError) {
	id, q, aerr := taggableIDAndQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	in := &UntagResourceInput{ResourceId: id, TagKeys: q["tagKeys"]}
	if len(in.TagKeys) == 0 {
		return request{}, badRequest("TagKeys is required")
	}
	if len(in.TagKeys) > maxTags {
		return request{}, badRequest("%d tag keys given; at most %d are allowed", len(in.TagKeys), maxTags)
	}
	drop := map[string]bool{}
	for _, k := range in.TagKeys {
		if aerr := validateTagKey(k); aerr != nil {
			return request{}, aerr
		}
		drop[k] = true
	}
	return request{in: in, resource: id, iam: iamFacts{untagKeys: in.TagKeys}, run: func() (int, any, *apiError) {
		return http.StatusOK, nil, e.state.updateTags(svcEFS, id, func(old []tag) ([]tag, *apiError) { return dropTags(old, drop), nil })
	}}, nil
}

func (e *Emulator) decodeListTagsForResource(r *http.Request) (request, *apiError) {
	id, q, aerr := taggableIDAndQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	in := &ListTagsForResourceInput{ResourceId: id, NextToken: q.Get("NextToken")}
	if in.MaxResults, aerr = queryInt(q, "MaxResults", maxDescribeItems); aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: id, run: func() (int, any, *apiError) {
		tags, next, aerr := e.state.listTags(svcEFS, id, in.NextToken, orDefault(in.MaxResults), time.Now())
		return http.StatusOK, listTagsOutput{Tags: wireTags(tags), NextToken: next}, aerr
	}}, nil
}
