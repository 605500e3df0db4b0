package iam

import (
	"errors"
	"strings"
	"testing"
)

const (
	fsARN   = "arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/fs-0123456789abcdef0"
	apARN   = "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/fsap-0123456789abcdef0"
	cluster = "aws:RequestTag/efs.csi.aws.com/cluster"
)

func mustParse(t testing.TB, docs ...string) []*Policy {
	t.Helper()
	var out []*Policy
	for _, d := range docs {
		p, err := Parse([]byte(d))
		if err != nil {
			t.Fatalf("Parse(%s): %v", d, err)
		}
		out = append(out, p)
	}
	return out
}

func ctx(kv ...any) map[string][]string {
	m := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case string:
			m[kv[i].(string)] = []string{v}
		case []string:
			m[kv[i].(string)] = v
		}
	}
	return m
}

// The cases follow IAM's documented examples (the policy evaluation logic,
// the Condition element and its operators' pages).
func TestEvaluate(t *testing.T) {
	allowAll := `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"*"}}`
	for _, tc := range []struct {
		name     string
		policies []string
		req      Request
		want     Decision
	}{
		{"default deny without policies", nil,
			Request{Action: "elasticfilesystem:DescribeFileSystems", Resource: "*"},
			Decision{Policy: -1, Statement: -1}},
		{"allow all", []string{allowAll},
			Request{Action: "elasticfilesystem:DescribeFileSystems", Resource: "*"},
			Decision{Allowed: true, Policy: 0, Statement: 0, Sid: "Statement[0]"}},
		{"explicit deny wins over an allow in another policy", []string{allowAll,
			`{"Statement":[{"Sid":"NoDelete","Effect":"Deny","Action":"elasticfilesystem:Delete*","Resource":"*"}]}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN},
			Decision{ExplicitDeny: true, Policy: 1, Statement: 0, Sid: "NoDelete"}},
		{"explicit deny wins in the same policy, whatever the order",
			[]string{`{"Statement":[{"Effect":"Deny","Action":"*","Resource":"*"},{"Effect":"Allow","Action":"*","Resource":"*"}]}`},
			Request{Action: "s3files:GetAccessPoint", Resource: "*"},
			Decision{ExplicitDeny: true, Policy: 0, Statement: 0, Sid: "Statement[0]"}},
		{"actions are case-insensitive",
			[]string{`{"Statement":{"Effect":"Allow","Action":"ElasticFileSystem:describe*","Resource":"*"}}`},
			Request{Action: "elasticfilesystem:DescribeAccessPoints", Resource: "*"},
			Decision{Allowed: true, Statement: 0, Sid: "Statement[0]"}},
		{"? matches one character",
			[]string{`{"Statement":{"Sid":"S","Effect":"Allow","Action":"elasticfilesystem:?escribeFileSystems","Resource":"*"}}`},
			Request{Action: "elasticfilesystem:DescribeFileSystems", Resource: "*"},
			Decision{Allowed: true, Sid: "S"}},
		{"? does not match two",
			[]string{`{"Statement":{"Effect":"Allow","Action":"elasticfilesystem:?scribeFileSystems","Resource":"*"}}`},
			Request{Action: "elasticfilesystem:DescribeFileSystems", Resource: "*"},
			Decision{Policy: -1, Statement: -1}},
		{"another service's action is not allowed",
			[]string{`{"Statement":{"Effect":"Allow","Action":"s3files:*","Resource":"*"}}`},
			Request{Action: "elasticfilesystem:DescribeFileSystems", Resource: "*"},
			Decision{Policy: -1, Statement: -1}},
		{"NotAction allows everything else",
			[]string{`{"Statement":{"Effect":"Allow","NotAction":"elasticfilesystem:Delete*","Resource":"*"}}`},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"NotAction does not allow what it names",
			[]string{`{"Statement":{"Effect":"Allow","NotAction":["elasticfilesystem:Delete*"],"Resource":"*"}}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN},
			Decision{Policy: -1, Statement: -1}},
		{"Deny with NotAction denies everything else",
			[]string{allowAll, `{"Statement":{"Effect":"Deny","NotAction":"elasticfilesystem:Describe*","Resource":"*"}}`},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN},
			Decision{ExplicitDeny: true, Policy: 1, Sid: "Statement[0]"}},
		{"resource ARN with a wildcard",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:elasticfilesystem:*:123456789012:access-point/*"}}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"resource ARN of another account",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:elasticfilesystem:*:111122223333:access-point/*"}}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN},
			Decision{Policy: -1, Statement: -1}},
		{"an ARN does not match a request on no resource",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:elasticfilesystem:*:*:*"}}`},
			Request{Action: "elasticfilesystem:DescribeFileSystems", Resource: "*"},
			Decision{Policy: -1, Statement: -1}},
		{"NotResource",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","NotResource":"arn:aws:elasticfilesystem:*:*:file-system/*"}}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"Null false: the tag must be present (present)",
			[]string{managedCreate},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN,
				Context: ctx(cluster, "true", "aws:TagKeys", "efs.csi.aws.com/cluster")},
			Decision{Allowed: true, Sid: "AllowCreateAccessPoint"}},
		{"Null false: the tag must be present (absent)",
			[]string{managedCreate},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN},
			Decision{Policy: -1, Statement: -1}},
		{"Null true: the tag must be absent",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Null":{"aws:ResourceTag/team":"true"}}}}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN, Context: ctx("aws:ResourceTag/other", "x")},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"Null true with the tag present",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Null":{"aws:ResourceTag/team":true}}}}`},
			Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN, Context: ctx("aws:ResourceTag/team", "x")},
			Decision{Policy: -1, Statement: -1}},
		{"ForAllValues over an absent key is true (so Null guards it)",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAllValues:StringEquals":{"aws:TagKeys":"a"}}}}`},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"ForAllValues: an extra key fails it",
			[]string{managedCreate},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN,
				Context: ctx(cluster, "true", "aws:TagKeys", []string{"efs.csi.aws.com/cluster", "team"})},
			Decision{Policy: -1, Statement: -1}},
		{"ForAllValues: every key among the allowed ones",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAllValues:StringEquals":{"aws:TagKeys":["a","b","c"]}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:TagKeys", []string{"c", "a"})},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"ForAnyValue: one key matches",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":["a","b"]}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:TagKeys", []string{"z", "b"})},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"ForAnyValue: none matches",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":["a","b"]}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:TagKeys", []string{"z"})},
			Decision{Policy: -1, Statement: -1}},
		{"ForAnyValue over an absent key is false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*"},
			Decision{Policy: -1, Statement: -1}},
		{"ForAnyValue with an empty key is false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:TagKeys", []string{})},
			Decision{Policy: -1, Statement: -1}},
		{"IfExists: absent key holds",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualsIfExists":{"aws:ResourceTag/team":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*"},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"IfExists: present key must match",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualsIfExists":{"aws:ResourceTag/team":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:ResourceTag/team", "b")},
			Decision{Policy: -1, Statement: -1}},
		{"a single-valued operator on a missing key is false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"aws:ResourceTag/team":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*"},
			Decision{Policy: -1, Statement: -1}},
		{"a negated operator on a missing key is true (IAM's documented rule)",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotEquals":{"aws:ResourceTag/team":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*"},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"StringNotEquals on a match is false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotEquals":{"aws:ResourceTag/team":["a","b"]}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:ResourceTag/team", "b")},
			Decision{Policy: -1, Statement: -1}},
		{"StringLike with *",
			[]string{upstreamCreate},
			Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN, Context: ctx(cluster, "true")},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"StringLike is case-sensitive",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringLike":{"k":"pv-*"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("k", "PV-1")},
			Decision{Policy: -1, Statement: -1}},
		{"StringLike pattern with * in the middle",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringLike":{"k":"pv-*-data"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("k", "pv-12-34-data")},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"StringNotLike",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotLike":{"k":"pv-*"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("k", "pv-1")},
			Decision{Policy: -1, Statement: -1}},
		{"StringEqualsIgnoreCase",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualsIgnoreCase":{"k":"Team-A"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("k", "TEAM-a")},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"StringNotEqualsIgnoreCase",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotEqualsIgnoreCase":{"k":"Team-A"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("k", "TEAM-a")},
			Decision{Policy: -1, Statement: -1}},
		{"condition key names are case-insensitive",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"AWS:requesttag/Team":"a"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:RequestTag/team", "a")},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"Bool",
			[]string{`{"Statement":{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}}`, allowAll},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SecureTransport", "false")},
			Decision{ExplicitDeny: true, Sid: "Statement[0]"}},
		{"Bool as a JSON bool, not matching",
			[]string{`{"Statement":{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":false}}}}`, allowAll},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SecureTransport", "true")},
			Decision{Allowed: true, Policy: 1, Sid: "Statement[0]"}},
		{"ArnLike per component",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:elasticfilesystem:*:123456789012:file-system/*"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SourceArn", fsARN)},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"ArnLike: * does not span a colon of the first five parts",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:elasticfilesystem:*:file-system/*"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SourceArn", fsARN)},
			Decision{Policy: -1, Statement: -1}},
		{"ArnEquals",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnEquals":{"aws:SourceArn":"` + fsARN + `"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SourceArn", fsARN)},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"ArnNotEquals",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnNotEquals":{"aws:SourceArn":"` + fsARN + `"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SourceArn", fsARN)},
			Decision{Policy: -1, Statement: -1}},
		{"ArnNotLike",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnNotLike":{"aws:SourceArn":"arn:aws:s3files:*:*:*"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("aws:SourceArn", fsARN)},
			Decision{Allowed: true, Sid: "Statement[0]"}},
		{"every operator and key must hold (AND)",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"a":"1","b":"2"},"StringLike":{"c":"*"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("a", "1", "b", "2")},
			Decision{Policy: -1, Statement: -1}},
		{"any value of a key may match (OR)",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"a":["0","1"],"b":"2"}}}}`},
			Request{Action: "x:Y", Resource: "*", Context: ctx("a", "1", "b", "2")},
			Decision{Allowed: true, Sid: "Statement[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Evaluate(mustParse(t, tc.policies...), tc.req)
			if got != tc.want {
				t.Errorf("Evaluate = %+v, want %+v", got, tc.want)
			}
		})
	}
}

const managedCreate = `{"Version":"2012-10-17","Statement":[{"Sid":"AllowCreateAccessPoint","Effect":"Allow",
	"Action":["elasticfilesystem:CreateAccessPoint"],"Resource":"*",
	"Condition":{"Null":{"aws:RequestTag/efs.csi.aws.com/cluster":"false"},
	"ForAllValues:StringEquals":{"aws:TagKeys":"efs.csi.aws.com/cluster"}}}]}`

const upstreamCreate = `{"Statement":[{"Effect":"Allow","Action":["elasticfilesystem:CreateAccessPoint"],"Resource":"*",
	"Condition":{"StringLike":{"aws:RequestTag/efs.csi.aws.com/cluster":"true"}}}]}`

func TestParseRefusesMalformedPolicies(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`not json`, "not a JSON object"},
		{`[]`, "not a JSON object"},
		{`null`, "null"},
		{`{"Version":"2012-10-17"}`, "no Statement"},
		{`{"Version":"2020-01-01","Statement":{"Effect":"Allow","Action":"*","Resource":"*"}}`, `Version "2020-01-01"`},
		{`{"Statement":[]}`, "empty array"},
		{`{"Statement":{"Effect":"allow","Action":"*","Resource":"*"}}`, `Effect "allow"`},
		{`{"Statement":{"Action":"*","Resource":"*"}}`, "missing Effect"},
		{`{"Statement":{"Effect":"Allow","Resource":"*"}}`, "missing Action"},
		{`{"Statement":{"Effect":"Allow","Action":"*"}}`, "missing Resource"},
		{`{"Statement":{"Effect":"Allow","Action":"*","NotAction":"*","Resource":"*"}}`, "both Action and NotAction"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","NotResource":"*"}}`, "both Resource and NotResource"},
		{`{"Statement":{"Effect":"Allow","Action":5,"Resource":"*"}}`, "Action must be a string"},
		{`{"Statement":{"Effect":"Allow","Action":["a:b",7],"Resource":"*"}}`, "Action[1] must be a string"},
		{`{"Statement":{"Effect":"Allow","Action":[],"Resource":"*"}}`, "Action is an empty array"},
		{`{"Statement":{"Effect":"Allow","Action":"CreateAccessPoint","Resource":"*"}}`, "service:action"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"fs-1"}}`, "an ARN"},
		{`{"Statement":{"Effect":true,"Action":"*","Resource":"*"}}`, "Effect must be a string"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Principal":"*"}}`, "Principal"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Actions":"*"}}`, `unknown element "Actions"`},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualz":{"k":"v"}}}}`, `unknown condition operator "StringEqualz"`},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForSomeValues:StringEquals":{"k":"v"}}}}`, "set qualifier"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NumericEquals":{"k":"1"}}}}`, "unknown condition operator"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"k":{"x":1}}}}}`, "want a string, bool or number"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"k":null}}}}`, "want a string, bool or number"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"k":[]}}}}`, "empty array"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":"k"}}}`, "not a JSON object"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Null":{"k":"maybe"}}}}`, "want true or false"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NullIfExists":{"k":"true"}}}}`, "Null takes neither"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Bool":{"k":"yes"}}}}`, "want true or false"},
		{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*"},"Extra":1}`, `unknown element "Extra"`},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			p, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error with %q", p, tc.want)
			}
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want ErrInvalidPolicy with %q", err, tc.want)
			}
		})
	}
}

func TestShippedPoliciesParse(t *testing.T) {
	for name, doc := range map[string]string{
		"ManagedPolicy": ManagedPolicy, "UpstreamExamplePolicy": UpstreamExamplePolicy, "UpstreamNodePolicy": UpstreamNodePolicy,
	} {
		p, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(p.Statements) == 0 {
			t.Errorf("%s: no statements", name)
		}
	}
}

// The managed policy's documented effect (testdata/README.md): only the
// cluster tag on creates, tag-on-create only with CreateAction, deletes
// only of tagged access points.
func TestManagedPolicy(t *testing.T) {
	pols := mustParse(t, ManagedPolicy)
	create := func(keys ...string) map[string][]string {
		c := map[string][]string{"aws:TagKeys": keys}
		for _, k := range keys {
			c["aws:RequestTag/"+k] = []string{"true"}
		}
		return c
	}
	withAction := func(c map[string][]string) map[string][]string {
		c["elasticfilesystem:CreateAction"] = []string{"CreateAccessPoint"}
		return c
	}
	for _, tc := range []struct {
		name string
		req  Request
		want bool
	}{
		{"describe", Request{Action: "elasticfilesystem:DescribeAccessPoints", Resource: fsARN}, true},
		{"create with the cluster tag", Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN, Context: create("efs.csi.aws.com/cluster")}, true},
		{"create with an extra tag", Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN, Context: create("efs.csi.aws.com/cluster", "team")}, false},
		{"create without tags", Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN}, false},
		{"tag on create", Request{Action: "elasticfilesystem:TagResource", Resource: apARN, Context: withAction(create("efs.csi.aws.com/cluster"))}, true},
		{"tag later", Request{Action: "elasticfilesystem:TagResource", Resource: apARN, Context: create("efs.csi.aws.com/cluster")}, false},
		{"delete tagged", Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN, Context: ctx("aws:ResourceTag/efs.csi.aws.com/cluster", "true")}, true},
		{"delete untagged", Request{Action: "elasticfilesystem:DeleteAccessPoint", Resource: apARN}, false},
		{"delete file system", Request{Action: "elasticfilesystem:DeleteFileSystem", Resource: fsARN}, false},
	} {
		if got := Evaluate(pols, tc.req); got.Allowed != tc.want {
			t.Errorf("%s: %+v, want allowed %v", tc.name, got, tc.want)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true}, {"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"*c", "abc", true},
		{"a*c", "abbbc", true}, {"a*c", "abcd", false}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"*a*b*", "xxaxxbxx", true}, {"*a*b*", "xxbxxaxx", false}, {"a**b", "ab", true}, {"?", "", false},
	} {
		if got := glob(tc.pattern, tc.s, false); got != tc.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestEvaluateDoesNotAllocate(t *testing.T) {
	pols := mustParse(t, ManagedPolicy, UpstreamExamplePolicy)
	req := Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN,
		Context: ctx(cluster, "true", "aws:TagKeys", []string{"efs.csi.aws.com/cluster", "team"})}
	if n := testing.AllocsPerRun(100, func() { Evaluate(pols, req) }); n != 0 {
		t.Errorf("Evaluate allocates %v times a call", n)
	}
}

func BenchmarkEvaluateManagedPolicy(b *testing.B) {
	pols := mustParse(b, ManagedPolicy)
	req := Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN,
		Context: ctx(cluster, "true", "aws:TagKeys", "efs.csi.aws.com/cluster")}
	for b.Loop() {
		Evaluate(pols, req)
	}
}
