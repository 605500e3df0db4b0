package iam

import (
	"errors"
	"testing"
)

// FuzzParse: a malformed policy is an ErrInvalidPolicy error, never a
// panic; a parsed one evaluates, against assorted requests, without one.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		ManagedPolicy, UpstreamExamplePolicy, UpstreamNodePolicy, managedCreate, upstreamCreate,
		`{"Statement":{"Effect":"Deny","NotAction":"a:*","NotResource":"arn:aws:s3:::b/*"}}`,
		`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringLikeIfExists":{"k":["*",true,1]},"Null":{"j":false}}}}`,
		`{"Statement":[{"Effect":"Allow","Action":"a:?","Resource":"arn:*:*:*:*:*","Condition":{"ArnNotLike":{"k":"arn:aws:*"}}}]}`,
		`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Bool":{"k":"TRUE"}}}}`,
		`{}`, `[]`, `null`, `{"Statement":null}`, `{"Statement":[null]}`,
	} {
		f.Add([]byte(seed))
	}
	reqs := []Request{
		{Action: "elasticfilesystem:CreateAccessPoint", Resource: "*"},
		{Action: "A:?", Resource: "arn:aws:s3:::b/c", Context: map[string][]string{"k": {"arn:aws:x:y:z:w"}, "J": {}}},
		{Action: "", Resource: "", Context: map[string][]string{"aws:TagKeys": {"a", "b"}, "k": {"true"}}},
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := Parse(doc)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) || p != nil {
				t.Fatalf("Parse: %v, %v: want ErrInvalidPolicy and no policy", p, err)
			}
			return
		}
		for _, r := range reqs {
			d := Evaluate([]*Policy{p}, r)
			if d.Allowed && d.ExplicitDeny {
				t.Fatalf("decision both allowed and denied: %+v", d)
			}
		}
	})
}
