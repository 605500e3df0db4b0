package iam

import (
	"strconv"
	"strings"
)

// Request is one authorization request.
type Request struct {
	// Action is service:operation, e.g. "elasticfilesystem:CreateAccessPoint";
	// matched case-insensitively.
	Action string
	// Resource is the ARN the request acts on, or "*" for none.
	Resource string
	// Context holds the condition keys, e.g. "aws:RequestTag/team" or
	// "aws:TagKeys"; names match case-insensitively, values as the
	// operator says.
	Context map[string][]string
}

// Decision is Evaluate's answer.
type Decision struct {
	// Allowed: a statement allowed the request and none denied it.
	Allowed bool
	// ExplicitDeny: a Deny statement matched (Allowed is false).
	ExplicitDeny bool
	// Policy and Statement index the deciding statement; -1 for the
	// default (implicit) deny.
	Policy, Statement int
	// Sid is the deciding statement's Sid, or "Statement[i]" without one;
	// "" for the default deny.
	Sid string
}

// Evaluate decides req against the identity policies of one principal, as
// IAM does: an explicit Deny in any policy wins; otherwise any Allow
// allows; otherwise the request is denied by default. It does not allocate.
func Evaluate(policies []*Policy, req Request) Decision {
	d := Decision{Policy: -1, Statement: -1}
	for pi, p := range policies {
		if p == nil {
			continue
		}
		for si := range p.Statements {
			s := &p.Statements[si]
			if s.Effect == Allow && d.Allowed {
				continue // only a Deny can change the answer now
			}
			if !s.applies(&req) {
				continue
			}
			if s.Effect == Deny {
				return Decision{ExplicitDeny: true, Policy: pi, Statement: si, Sid: s.label(si)}
			}
			d = Decision{Allowed: true, Policy: pi, Statement: si, Sid: s.label(si)}
		}
	}
	return d
}

// label names the statement for a decision (computed at parse, so that
// Evaluate does not allocate).
func (s *Statement) label(i int) string {
	if s.name == "" { // a Statement built by hand, not by Parse
		return statementName(s.Sid, i)
	}
	return s.name
}

func statementName(sid string, i int) string {
	if sid != "" {
		return sid
	}
	return "Statement[" + strconv.Itoa(i) + "]"
}

// applies: the request is in the statement's actions and resources and
// every condition holds.
func (s *Statement) applies(req *Request) bool {
	if anyMatch(s.Actions, req.Action, matchAction) == s.NotAction {
		return false
	}
	if anyMatch(s.Resources, req.Resource, matchResource) == s.NotResource {
		return false
	}
	for i := range s.Conditions {
		if !s.Conditions[i].holds(req.Context) {
			return false
		}
	}
	return true
}

func anyMatch(patterns []string, v string, match func(pattern, v string) bool) bool {
	for _, p := range patterns {
		if match(p, v) {
			return true
		}
	}
	return false
}

// matchAction: pattern is lower-cased at parse; actions are case-insensitive.
func matchAction(pattern, action string) bool { return glob(pattern, action, true) }

// matchResource matches a Resource element: "*" is every resource (and the
// "*" of requests that name none); otherwise an ARN pattern.
func matchResource(pattern, resource string) bool {
	return pattern == "*" || arnLike(pattern, resource)
}

// arnLike matches an ARN against a pattern component by component, as IAM
// does: the first five colon-separated parts (arn, partition, service,
// region, account) each on their own, so that a wildcard never spans a
// colon there, and the rest (the resource, which may hold colons) as one.
func arnLike(pattern, arn string) bool {
	if pattern == "*" {
		return true
	}
	for range 5 {
		pc, prest, pok := strings.Cut(pattern, ":")
		vc, vrest, vok := strings.Cut(arn, ":")
		if !pok || !vok || !glob(pc, vc, false) {
			return false
		}
		pattern, arn = prest, vrest
	}
	return glob(pattern, arn, false)
}

// glob matches s against pattern, where * is any run of characters and ?
// any one; fold compares ASCII letters case-insensitively (pattern already
// lower-cased). Linear backtracking on the last *: no recursion, no
// allocation.
func glob(pattern, s string, fold bool) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i] || (fold && pattern[p] == lower(s[i]))):
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// lookup finds a condition key in the request context, by its exact
// spelling first (the common case), then case-insensitively.
func lookup(ctx map[string][]string, key string) ([]string, bool) {
	if v, ok := ctx[key]; ok {
		return v, true
	}
	for k, v := range ctx {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

// holds evaluates the condition against the request context. A key that is
// absent (or has no values): Null tests exactly that; IfExists holds;
// ForAllValues holds (nothing fails it) and ForAnyValue does not (nothing
// matches); a single-valued operator does not match, so a positive one is
// false and a negated one (StringNotEquals, ArnNotLike, ...) true, as IAM
// documents ("Condition operators", the note on missing keys).
func (c *Condition) holds(ctx map[string][]string) bool {
	vals, _ := lookup(ctx, c.Key)
	absent := len(vals) == 0
	if c.kind == opNull {
		want := "false"
		if absent {
			want = "true"
		}
		for _, v := range c.Values {
			if v == want {
				return true
			}
		}
		return false
	}
	if absent {
		switch {
		case c.ifExists:
			return true
		case c.set == setForAllValues:
			return true
		case c.set == setForAnyValue:
			return false
		}
		return c.negated
	}
	switch c.set {
	case setForAllValues:
		for _, v := range vals {
			if !c.holdsFor(v) {
				return false
			}
		}
		return true
	case setForAnyValue:
		for _, v := range vals {
			if c.holdsFor(v) {
				return true
			}
		}
		return false
	}
	// A single-valued operator: a positive one matches when a request value
	// matches a policy value; a negated one when none does.
	for _, v := range vals {
		if c.matches(v) {
			return !c.negated
		}
	}
	return c.negated
}

// holdsFor is the operator, negation included, on one request value.
func (c *Condition) holdsFor(v string) bool { return c.matches(v) != c.negated }

// matches: v matches one of the policy's values (before negation).
func (c *Condition) matches(v string) bool {
	for _, want := range c.Values {
		if c.match(want, v) {
			return true
		}
	}
	return false
}

func (c *Condition) match(want, v string) bool {
	switch c.kind {
	case opStringEquals:
		return want == v
	case opStringEqualsIgnoreCase, opBool: // want lower-cased at parse
		return strings.EqualFold(want, v)
	case opStringLike:
		return glob(want, v, false)
	case opArnLike:
		return arnLike(want, v)
	}
	return false
}
