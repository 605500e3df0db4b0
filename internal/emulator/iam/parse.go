// Package iam evaluates AWS IAM identity policies as IAM does, for the
// emulator: Parse reads a policy document once, Evaluate decides a request
// against a principal's policies (explicit Deny wins, then any Allow, else
// the default deny). It knows the Action/NotAction, Resource/NotResource and
// Condition elements and the string, ARN, Bool and Null condition operators,
// with the IfExists suffix and the ForAllValues/ForAnyValue qualifiers.
// Policy variables (${aws:username}) are not substituted: they match as the
// literal text.
//
// It depends on nothing of the emulator, so that tests and tools can
// evaluate policies on their own.
package iam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidPolicy is wrapped by every error of Parse.
var ErrInvalidPolicy = errors.New("invalid IAM policy")

// Policy is a parsed identity policy.
type Policy struct {
	Version    string
	ID         string
	Statements []Statement
}

// Effect is a statement's Effect.
type Effect string

// The two effects IAM knows (case-sensitive, as IAM's).
const (
	Allow Effect = "Allow"
	Deny  Effect = "Deny"
)

// Statement is one parsed statement.
type Statement struct {
	Sid    string
	Effect Effect
	// NotAction: Actions lists what the statement does not apply to.
	NotAction bool
	Actions   []string // lower-cased, as actions match case-insensitively
	// NotResource: Resources lists what the statement does not apply to.
	NotResource bool
	Resources   []string
	Conditions  []Condition

	name string // Sid, or Statement[i]: for decisions
}

// Condition is one key of one operator of a statement's Condition block:
// every Condition of a statement must hold.
type Condition struct {
	// Operator is the name as written, e.g. "ForAllValues:StringEquals".
	Operator string
	Key      string
	Values   []string

	kind     opKind
	negated  bool
	ifExists bool
	set      setQualifier
	key      string // lower-cased Key, for case-insensitive lookups
}

type opKind int

const (
	opStringEquals opKind = iota
	opStringEqualsIgnoreCase
	opStringLike
	opArnLike // ArnEquals matches as ArnLike does, as IAM's
	opBool
	opNull
)

type setQualifier int

const (
	setNone setQualifier = iota
	setForAllValues
	setForAnyValue
)

// operators are the base operator names: their kind and whether negated.
var operators = map[string]struct {
	kind    opKind
	negated bool
}{
	"StringEquals":              {opStringEquals, false},
	"StringNotEquals":           {opStringEquals, true},
	"StringEqualsIgnoreCase":    {opStringEqualsIgnoreCase, false},
	"StringNotEqualsIgnoreCase": {opStringEqualsIgnoreCase, true},
	"StringLike":                {opStringLike, false},
	"StringNotLike":             {opStringLike, true},
	"ArnEquals":                 {opArnLike, false},
	"ArnLike":                   {opArnLike, false},
	"ArnNotEquals":              {opArnLike, true},
	"ArnNotLike":                {opArnLike, true},
	"Bool":                      {opBool, false},
	"Null":                      {opNull, false},
}

// Parse reads a JSON identity policy document. A malformed one is an error
// wrapping ErrInvalidPolicy that names the element at fault.
func Parse(doc []byte) (*Policy, error) {
	p, err := parse(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPolicy, err)
	}
	return p, nil
}

func parse(doc []byte) (*Policy, error) {
	top, err := object(doc, "the policy")
	if err != nil {
		return nil, err
	}
	p := new(Policy)
	for _, k := range sortedKeys(top) { // sorted: the same error every time
		v := top[k]
		switch k {
		case "Version":
			if p.Version, err = stringValue(v, "Version"); err != nil {
				return nil, err
			}
			if p.Version != "2012-10-17" && p.Version != "2008-10-17" {
				return nil, fmt.Errorf("Version %q: want 2012-10-17 or 2008-10-17", p.Version)
			}
		case "Id":
			if p.ID, err = stringValue(v, "Id"); err != nil {
				return nil, err
			}
		case "Statement":
			if p.Statements, err = statements(v); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("unknown element %q at the top level (want Version, Id, Statement)", k)
		}
	}
	if _, ok := top["Statement"]; !ok {
		return nil, errors.New("no Statement")
	}
	return p, nil
}

// object decodes raw as a JSON object, keeping each member's text.
func object(raw json.RawMessage, what string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object: %v", what, err)
	}
	if m == nil { // JSON null
		return nil, fmt.Errorf("%s is null, not a JSON object", what)
	}
	return m, nil
}

// statements reads Statement: one object or an array of them.
func statements(raw json.RawMessage) ([]Statement, error) {
	raws := []json.RawMessage{raw}
	if isArray(raw) {
		if err := json.Unmarshal(raw, &raws); err != nil {
			return nil, fmt.Errorf("Statement: %v", err)
		}
		if len(raws) == 0 {
			return nil, errors.New("Statement is an empty array")
		}
	}
	out := make([]Statement, len(raws))
	for i, r := range raws {
		s, err := statement(r)
		if err != nil {
			return nil, fmt.Errorf("Statement[%d]: %v", i, err)
		}
		s.name = statementName(s.Sid, i)
		out[i] = s
	}
	return out, nil
}

func isArray(raw json.RawMessage) bool {
	return len(bytes.TrimLeft(raw, " \t\r\n")) > 0 && bytes.TrimLeft(raw, " \t\r\n")[0] == '['
}

func statement(raw json.RawMessage) (Statement, error) {
	m, err := object(raw, "statement")
	if err != nil {
		return Statement{}, err
	}
	var s Statement
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch k {
		case "Sid":
			s.Sid, err = stringValue(v, "Sid")
		case "Effect":
			var e string
			if e, err = stringValue(v, "Effect"); err == nil {
				s.Effect = Effect(e)
				if s.Effect != Allow && s.Effect != Deny {
					err = fmt.Errorf("Effect %q: want Allow or Deny", e)
				}
			}
		case "Action", "NotAction":
			s.Actions, err = actions(v, k)
			s.NotAction = k == "NotAction"
		case "Resource", "NotResource":
			s.Resources, err = resources(v, k)
			s.NotResource = k == "NotResource"
		case "Condition":
			s.Conditions, err = conditions(v)
		case "Principal", "NotPrincipal":
			err = fmt.Errorf("%s is not allowed in an identity policy", k)
		default:
			err = fmt.Errorf("unknown element %q", k)
		}
		if err != nil {
			return Statement{}, err
		}
	}
	return s, requireElements(m)
}

// requireElements: Effect, one of Action and NotAction, one of Resource and
// NotResource, as IAM requires of an identity policy's statement.
func requireElements(m map[string]json.RawMessage) error {
	has := func(k string) bool { _, ok := m[k]; return ok }
	switch {
	case !has("Effect"):
		return errors.New("missing Effect")
	case has("Action") && has("NotAction"):
		return errors.New("both Action and NotAction")
	case !has("Action") && !has("NotAction"):
		return errors.New("missing Action (or NotAction)")
	case has("Resource") && has("NotResource"):
		return errors.New("both Resource and NotResource")
	case !has("Resource") && !has("NotResource"):
		return errors.New("missing Resource (or NotResource)")
	}
	return nil
}

// stringValue decodes a JSON string.
func stringValue(raw json.RawMessage, what string) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || isNull(raw) {
		return "", fmt.Errorf("%s must be a string, got %s", what, excerpt(raw))
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// stringList decodes a string or a non-empty array of strings.
func stringList(raw json.RawMessage, what string) ([]string, error) {
	if !isArray(raw) {
		s, err := stringValue(raw, what)
		return []string{s}, err
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	if len(raws) == 0 {
		return nil, fmt.Errorf("%s is an empty array", what)
	}
	out := make([]string, len(raws))
	for i, r := range raws {
		s, err := stringValue(r, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// actions reads Action or NotAction: "*" or "service:action" patterns.
func actions(raw json.RawMessage, what string) ([]string, error) {
	list, err := stringList(raw, what)
	if err != nil {
		return nil, err
	}
	for i, a := range list {
		if svc, _, ok := strings.Cut(a, ":"); a != "*" && (!ok || svc == "") {
			return nil, fmt.Errorf("%s %q: want \"*\" or service:action", what, a)
		}
		list[i] = strings.ToLower(a)
	}
	return list, nil
}

// resources reads Resource or NotResource: "*" or ARN patterns.
func resources(raw json.RawMessage, what string) ([]string, error) {
	list, err := stringList(raw, what)
	if err != nil {
		return nil, err
	}
	for _, r := range list {
		if r != "*" && (!strings.HasPrefix(r, "arn:") || strings.Count(r, ":") < 5) {
			return nil, fmt.Errorf("%s %q: want \"*\" or an ARN (arn:partition:service:region:account:resource)", what, r)
		}
	}
	return list, nil
}

// conditions reads a Condition block, {operator: {key: value(s)}}, into one
// Condition per key, in a stable order (for messages and tests).
func conditions(raw json.RawMessage) ([]Condition, error) {
	block, err := object(raw, "Condition")
	if err != nil {
		return nil, err
	}
	var out []Condition
	for _, op := range sortedKeys(block) {
		keys, err := object(block[op], "Condition "+op)
		if err != nil {
			return nil, err
		}
		for _, key := range sortedKeys(keys) {
			c, err := condition(op, key, keys[key])
			if err != nil {
				return nil, fmt.Errorf("Condition %s %q: %v", op, key, err)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// condition parses one operator name ([ForAllValues:|ForAnyValue:]Base[IfExists])
// and one key's values.
func condition(op, key string, raw json.RawMessage) (Condition, error) {
	c := Condition{Operator: op, Key: key, key: strings.ToLower(key)}
	base := op
	if q, rest, ok := strings.Cut(op, ":"); ok {
		switch q {
		case "ForAllValues":
			c.set = setForAllValues
		case "ForAnyValue":
			c.set = setForAnyValue
		default:
			return c, fmt.Errorf("unknown set qualifier %q (want ForAllValues or ForAnyValue)", q)
		}
		base = rest
	}
	base, c.ifExists = strings.CutSuffix(base, "IfExists")
	o, ok := operators[base]
	if !ok {
		return c, fmt.Errorf("unknown condition operator %q", op)
	}
	c.kind, c.negated = o.kind, o.negated
	if key == "" {
		return c, errors.New("empty condition key")
	}
	var err error
	if c.Values, err = conditionValues(raw); err != nil {
		return c, err
	}
	return c, checkCondition(&c)
}

// checkCondition refuses what IAM refuses of an operator's values and
// normalizes them for matching.
func checkCondition(c *Condition) error {
	switch c.kind {
	case opNull:
		if c.ifExists || c.set != setNone {
			return errors.New("Null takes neither IfExists nor a set qualifier")
		}
		fallthrough
	case opBool:
		for i, v := range c.Values {
			lv := strings.ToLower(v)
			if lv != "true" && lv != "false" {
				return fmt.Errorf("value %q: want true or false", v)
			}
			c.Values[i] = lv
		}
	case opStringEqualsIgnoreCase:
		for i, v := range c.Values {
			c.Values[i] = strings.ToLower(v)
		}
	}
	return nil
}

// conditionValues reads a condition's value: a string, bool or number, or
// a non-empty array of them.
func conditionValues(raw json.RawMessage) ([]string, error) {
	raws := []json.RawMessage{raw}
	if isArray(raw) {
		if err := json.Unmarshal(raw, &raws); err != nil {
			return nil, err
		}
		if len(raws) == 0 {
			return nil, errors.New("empty array of values")
		}
	}
	out := make([]string, len(raws))
	for i, r := range raws {
		var v any
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case string:
			out[i] = v
		case bool:
			out[i] = strconv.FormatBool(v)
		case float64: // a number: its text as written
			out[i] = string(bytes.TrimSpace(r))
		default:
			return nil, fmt.Errorf("value %s: want a string, bool or number", excerpt(r))
		}
	}
	return out, nil
}

// excerpt is raw JSON for a message, cut short.
func excerpt(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}
