package efs_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// authRecorder answers DeleteAccessPoint and remembers the Authorization
// header, to see which credentials and region signed the request.
func authRecorder(t *testing.T) (*fakeEFS, *string) {
	var auth string
	fake := newFake(t)
	fake.always = func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.WriteHeader(http.StatusNoContent)
	}
	return fake, &auth
}

// New finds region and endpoint in the standard environment and never needs
// the EC2 metadata service (these tests run with none; asking it would
// time out). Not parallel: they set environment variables.
func TestNewResolvesRegionAndEndpoint(t *testing.T) {
	fake, auth := authRecorder(t)
	tests := []struct {
		name       string
		env        map[string]string
		cfg        efs.Config
		wantErr    bool
		wantRegion string // in the request's signature scope
	}{
		{name: "region and endpoint from the config", cfg: efs.Config{Region: "eu-west-1", Endpoint: fake.URL()}, wantRegion: "eu-west-1"},
		{name: "region from AWS_REGION", env: map[string]string{"AWS_REGION": "ap-south-1"}, cfg: efs.Config{Endpoint: fake.URL()}, wantRegion: "ap-south-1"},
		{name: "endpoint from AWS_ENDPOINT_URL_EFS", env: map[string]string{"AWS_REGION": "us-west-2", "AWS_ENDPOINT_URL_EFS": fake.URL()}, wantRegion: "us-west-2"},
		{name: "no region with an endpoint override defaults to us-east-1", cfg: efs.Config{Endpoint: fake.URL()}, wantRegion: "us-east-1"},
		{name: "no region with the env endpoint defaults to us-east-1", env: map[string]string{"AWS_ENDPOINT_URL_EFS": fake.URL()}, wantRegion: "us-east-1"},
		{name: "no region and no endpoint is an error", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := efs.New(t.Context(), tt.cfg)
			if tt.wantErr {
				if err == nil {
					t.Fatal("New succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := c.DeleteAccessPoint(t.Context(), "fsap-1"); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(*auth, "/"+tt.wantRegion+"/elasticfilesystem/") {
				t.Errorf("request signed as %q, want region %s", *auth, tt.wantRegion)
			}
		})
	}
}

// With an endpoint override and no credentials anywhere, requests are still
// sent (signed with dummy keys): the driver runs against the emulator with
// no AWS setup at all.
func TestNoCredentialsWithEndpointOverrideStillSends(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "") // New must disable it by itself
	fake, auth := authRecorder(t)
	c, err := efs.New(t.Context(), efs.Config{Endpoint: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAccessPoint(t.Context(), "fsap-1"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(*auth, "Credential=efs-csi-no-credentials/") {
		t.Errorf("request signed as %q, want the fallback credentials", *auth)
	}
}

// Static credentials from the environment win over the fallback.
func TestEnvironmentCredentialsAreUsed(t *testing.T) {
	fake, auth := authRecorder(t)
	c, _ := newClient(t, fake.URL(), nil)
	if err := c.DeleteAccessPoint(t.Context(), "fsap-1"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(*auth, "Credential=AKIDTEST/") {
		t.Errorf("request signed as %q, want AKIDTEST", *auth)
	}
}
