package emulator

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
)

// IAM identity policies (docs/emulator.md, "IAM policies"). With
// Config.IAMPolicies every caller is one principal with those identity
// policies, and every EFS, S3 Files and STS request is evaluated after it is
// decoded and before it is applied, as AWS evaluates it: the action
// (elasticfilesystem:<Op>, s3files:<Op>, sts:AssumeRole), the ARN of the
// resource the request names ("*" for none) and the condition keys
// aws:RequestTag/<key>, aws:TagKeys, aws:ResourceTag/<key> and
// <service>:CreateAction. Without policies nothing is evaluated.

// iamFacts is what IAM evaluation needs of a request beyond its operation
// and resource ID; decoders fill it in.
type iamFacts struct {
	// tags are the tags the request applies: a create's or TagResource's
	// (aws:RequestTag/<key>, aws:TagKeys).
	tags []tag
	// untagKeys are UntagResource's keys (aws:TagKeys).
	untagKeys []string
	// arn names the resource when request.resource does not (AssumeRole:
	// the role).
	arn string
	// createAction is set on creates ("CreateAccessPoint"): with tags, the
	// create is also authorized as TagResource with <service>:CreateAction.
	createAction string
}

// iamService is the IAM service prefix of op's actions: its signing
// service's, and STS's (whose signature the emulator does not check).
func iamService(op Op) string {
	if op == OpAssumeRole {
		return "sts"
	}
	return signingService(op)
}

// iamOpName is op without its API's prefix ("S3Files.TagResource" ->
// "TagResource").
func iamOpName(op Op) string { return strings.TrimPrefix(string(op), "S3Files.") }

// iamActions maps each operation to its IAM action, built once, so that a
// request costs no string building for it.
var iamActions = func() map[Op]string {
	m := map[Op]string{}
	for _, op := range Ops() {
		m[op] = iamService(op) + ":" + iamOpName(op)
	}
	return m
}()

// tagResourceAction is the action that authorizes tag-on-create.
func tagResourceAction(op Op) string { return iamService(op) + ":TagResource" }

// parsePolicies parses Config.IAMPolicies; an error names the policy.
func parsePolicies(texts []string) ([]*iam.Policy, error) {
	var out []*iam.Policy
	for i, text := range texts {
		p, err := iam.Parse([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("IAM policy %d (of %d): %w", i+1, len(texts), err)
		}
		out = append(out, p)
	}
	return out, nil
}

// authorizeIAM evaluates req under the configured policies. A denial
// answers AccessDeniedException 403, as AWS words it, and names the denied
// action (for the request log).
func (e *Emulator) authorizeIAM(who caller, op Op, req *request) (deniedAction string, aerr *apiError) {
	if len(e.policies) == 0 {
		return "", nil // no policies: everything is allowed, as before IAM
	}
	arn, resTags, _ := e.iamResource(who, op, req)
	ctx := make(map[string][]string, 2*len(req.iam.tags)+len(resTags)+1)
	addRequestTags(ctx, req.iam.tags)
	if len(req.iam.untagKeys) > 0 {
		ctx["aws:TagKeys"] = req.iam.untagKeys
	}
	addResourceTags(ctx, resTags)
	action := iamActions[op]
	if d := iam.Evaluate(e.policies, iam.Request{Action: action, Resource: arn, Context: ctx}); !d.Allowed {
		return action, iamDenied(who, action, arn, d)
	}
	if req.iam.createAction == "" || len(req.iam.tags) == 0 {
		return "", nil
	}
	// Tag-on-create: EFS authorizes the tags of a create as a TagResource
	// of its own, with <service>:CreateAction naming the create. The
	// resource is created with the tags, so aws:ResourceTag/* is the tags
	// being applied: a choice (AWS does not document the key for this
	// case) that makes upstream's example policy, whose TagResource
	// statement conditions on aws:ResourceTag, allow upstream's own
	// creates, as it does on AWS.
	ctx = make(map[string][]string, 3*len(req.iam.tags)+1)
	addRequestTags(ctx, req.iam.tags)
	addResourceTags(ctx, req.iam.tags)
	ctx[iamService(op)+":CreateAction"] = []string{req.iam.createAction}
	action = tagResourceAction(op)
	if d := iam.Evaluate(e.policies, iam.Request{Action: action, Resource: arn, Context: ctx}); !d.Allowed {
		return action, iamDenied(who, action, arn, d)
	}
	return "", nil
}

func addRequestTags(ctx map[string][]string, tags []tag) {
	if len(tags) == 0 {
		return
	}
	keys := make([]string, len(tags))
	for i, t := range tags {
		keys[i] = t.Key
		ctx["aws:RequestTag/"+t.Key] = []string{t.Value}
	}
	ctx["aws:TagKeys"] = keys
}

func addResourceTags(ctx map[string][]string, tags []tag) {
	for _, t := range tags {
		ctx["aws:ResourceTag/"+t.Key] = []string{t.Value}
	}
}

// iamDenied is AWS's answer to a request no policy allows or one denies.
func iamDenied(who caller, action, arn string, d iam.Decision) *apiError {
	why := "because no identity-based policy allows the " + action + " action"
	if d.ExplicitDeny {
		why = "with an explicit deny in an identity-based policy"
	}
	return errorf(http.StatusForbidden, codeAccessDenied,
		"User: %s is not authorized to perform: %s on resource: %s %s", who.arn, action, arn, why)
}

// iamResource is the ARN of the resource req names, as op's service spells
// it, and that resource's tags (aws:ResourceTag/*) when it exists. An
// access point's ARN is its own; a mount target's is its file system's (EFS
// has no mount target ARNs in policies the driver meets); a resource that
// does not exist is named in the caller's account (the request then answers
// its NotFound, if allowed).
func (e *Emulator) iamResource(who caller, op Op, req *request) (arn string, tags []tag, exists bool) {
	if req.iam.arn != "" {
		return req.iam.arn, nil, false
	}
	svc := iamService(op)
	prefix := "arn:aws:" + svc + ":" + region + ":"
	id := req.resource
	if id == "" {
		if iamOpName(op) == "CreateFileSystem" {
			return prefix + who.account + ":file-system/*", nil, false
		}
		return "*", nil, false
	}
	api := svcEFS
	if svc == "s3files" {
		api = svcS3Files
	}
	owner, fsID, tags, ok := e.state.iamFacts(api, id)
	if !ok {
		owner = who.account
		switch {
		case strings.HasPrefix(id, "fs-"):
			fsID = id
		case strings.HasPrefix(id, "fsmt-"):
			return "*", nil, false
		default:
			fsID = "*" // an S3 Files access point's unknown file system
		}
	}
	switch {
	case !strings.HasPrefix(id, "fsap-"):
		arn = prefix + owner + ":file-system/" + fsID
	case svc == "s3files":
		arn = prefix + owner + ":file-system/" + fsID + "/access-point/" + id
	default:
		arn = prefix + owner + ":access-point/" + id
	}
	return arn, tags, ok
}

// iamFacts is what IAM needs of resource id as api sees it: its owner, its
// file system and its tags (a mount target: its file system's); false when
// api has no such resource. Tag slices are replaced, never changed in
// place, so the caller may read them after the lock.
func (s *state) iamFacts(api service, id string) (owner, fsID string, tags []tag, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.HasPrefix(id, "fsap-"):
		if ap := s.apOf(api, id); ap != nil {
			return ap.account, ap.FileSystemID, ap.Tags, true
		}
		return "", "", nil, false
	case strings.HasPrefix(id, "fsmt-"):
		mt := s.mts[id]
		if mt == nil {
			return "", "", nil, false
		}
		id = mt.FileSystemID
	}
	fs := s.fsOf(api, id)
	if fs == nil {
		return "", "", nil, false
	}
	return fs.owner(), fs.ID, fs.Tags, true
}
