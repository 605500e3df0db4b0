package efs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// Cross-account: the driver's own credentials (AKIDTEST, the default
// account's) assume roles of otherAccount, which owns otherFS.
const (
	otherAccount = "111122223333"
	otherFS      = "fs-11111111111111111"
	otherRole    = "arn:aws:iam::" + otherAccount + ":role/efs-csi"
	guardedRole  = "arn:aws:iam::" + otherAccount + ":role/guarded"
	thirdRole    = "arn:aws:iam::444455556666:role/efs-csi"
	externalID   = "ext-4f1c2e"
)

// startAccounts serves an emulator with accounts and returns a client of the
// default account whose role clients ask the emulator's STS.
func startAccounts(t *testing.T, mod func(*efs.Config)) (*efs.Client, *emulator.Emulator) {
	t.Helper()
	url, e := emulatortest.Start(t, emulator.Config{
		FileSystems:      []string{emuFS},
		FileSystemOwners: map[string]string{otherFS: otherAccount},
		Roles:            []emulator.Role{{ARN: otherRole}, {ARN: guardedRole, ExternalID: externalID}, {ARN: thirdRole}},
	})
	c, _ := newClient(t, url, func(cfg *efs.Config) {
		cfg.STSEndpoint = url
		if mod != nil {
			mod(cfg)
		}
	})
	return c, e
}

func asRole(t *testing.T, c *efs.Client, role, ext string) *efs.Client {
	t.Helper()
	rc, err := c.AsRole(role, ext)
	if err != nil {
		t.Fatalf("AsRole %s: %v", role, err)
	}
	return rc
}

// A role client's calls are the role's account's: its file systems are
// reachable, another account's are ErrAccessDenied, whichever side asks.
func TestRoleClientActsAsTheRolesAccount(t *testing.T) {
	base, _ := startAccounts(t, nil)
	ctx := t.Context()
	role := asRole(t, base, otherRole, "")
	for _, tt := range []struct {
		name   string
		client *efs.Client
		fsID   string
		denied bool
	}{
		{"the role on its account's file system", role, otherFS, false},
		{"the role on the driver's account's file system", role, emuFS, true},
		{"the driver's own credentials on the other account's", base, otherFS, true},
		{"the driver's own credentials on its own", base, emuFS, false},
		{"a role of a third account on the other account's", asRole(t, base, thirdRole, ""), otherFS, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := emuInput(t.Name()[len(t.Name())-20:])
			in.FileSystemID = tt.fsID
			_, err := tt.client.CreateAccessPoint(ctx, in)
			if tt.denied != errors.Is(err, efs.ErrAccessDenied) || (!tt.denied && err != nil) {
				t.Errorf("CreateAccessPoint on %s: %v, want denied %v", tt.fsID, err, tt.denied)
			}
		})
	}
}

// The SDK's credentials cache: many calls, concurrent or not, cost one
// AssumeRole per role client.
func TestRoleCredentialsAreCachedAcrossCalls(t *testing.T) {
	base, emu := startAccounts(t, nil)
	role := asRole(t, base, otherRole, "")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			_, err := role.DescribeFileSystem(t.Context(), otherFS)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if _, err := role.DescribeMountTargets(t.Context(), otherFS); err != nil {
			t.Fatal(err)
		}
	}
	if n := emu.Counts()[emulator.OpAssumeRole]; n != 1 {
		t.Errorf("60 calls made %d AssumeRole calls, want 1", n)
	}
}

// Credentials within the expiry window are replaced before they expire:
// the emulator issues some that are valid for half the window (it answers
// them still), and each call asks for new ones; credentials valid for
// longer are kept.
func TestRoleCredentialsAreRefreshedBeforeTheyExpire(t *testing.T) {
	const window = 20 * time.Minute // more than twice the default: ignoring it would cache
	base, emu := startAccounts(t, func(c *efs.Config) { c.RoleExpiryWindow = window })
	role := asRole(t, base, otherRole, "")
	// The driver asks for an hour: issued as if almost an hour ago.
	emu.SetClockOffset(-(time.Hour - window/2))
	for i := 1; i <= 3; i++ {
		if _, err := role.DescribeFileSystem(t.Context(), otherFS); err != nil {
			t.Fatalf("call %d: %v (the emulator still accepts the credentials: no call may fail)", i, err)
		}
		if n := emu.Counts()[emulator.OpAssumeRole]; n != int64(i) {
			t.Fatalf("after %d calls with credentials inside the window: %d AssumeRole calls, want %d", i, n, i)
		}
	}
	emu.SetClockOffset(0)
	for range 3 {
		if _, err := role.DescribeFileSystem(t.Context(), otherFS); err != nil {
			t.Fatal(err)
		}
	}
	if n := emu.Counts()[emulator.OpAssumeRole]; n != 4 {
		t.Errorf("fresh credentials: %d AssumeRole calls in all, want 4 (one refresh, then cached)", n)
	}
}

// A wrong or missing external ID is ErrAccessDenied; the error names the
// role but neither the external ID nor any credential.
func TestRoleExternalID(t *testing.T) {
	base, _ := startAccounts(t, nil)
	for _, tt := range []struct {
		name, ext string
		denied    bool
	}{
		{"right", externalID, false},
		{"wrong", "ext-wrong-value", true},
		{"missing", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := asRole(t, base, guardedRole, tt.ext).DescribeFileSystem(t.Context(), otherFS)
			if !tt.denied {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, efs.ErrAccessDenied) {
				t.Fatalf("got %v, want ErrAccessDenied", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, guardedRole) {
				t.Errorf("error %q does not name the role", msg)
			}
			for _, secret := range []string{tt.ext, externalID, "secret"} {
				if secret != "" && strings.Contains(msg, secret) {
					t.Errorf("error %q contains %q", msg, secret)
				}
			}
		})
	}
}

// resetOnRetry clears the emulator's faults when the first retry is
// scheduled: the retried call then succeeds.
type resetOnRetry struct {
	emu  *emulator.Emulator
	once sync.Once
}

func (r *resetOnRetry) APICall(string, string, time.Duration) {}
func (r *resetOnRetry) Retry(string)                          { r.once.Do(r.emu.ResetFaults) }

// A failed AssumeRole fails the EFS call's attempt, classified like EFS's
// own answers, and the call's retry loop retries it.
func TestFaultedAssumeRole(t *testing.T) {
	t.Run("a 5xx is retried", func(t *testing.T) {
		obs := &resetOnRetry{}
		base, emu := startAccounts(t, func(c *efs.Config) { c.Observer = obs })
		obs.emu = emu
		emu.SetFault(emulator.OpAssumeRole, emulator.Fault{ErrorRate: 1})
		if _, err := asRole(t, base, otherRole, "").DescribeFileSystem(t.Context(), otherFS); err != nil {
			t.Fatalf("after one retry: %v", err)
		}
		if n := emu.Counts()[emulator.OpAssumeRole]; n != 2 {
			t.Errorf("%d AssumeRole calls, want 2 (the failed one and its retry)", n)
		}
	})
	for _, tt := range []struct {
		name  string
		fault emulator.Fault
		want  error
	}{
		{"5xx until the deadline is ErrUnavailable", emulator.Fault{ErrorRate: 1}, efs.ErrUnavailable},
		{"throttled until the deadline is ErrThrottled", emulator.Fault{ThrottleRate: 0.0001, ThrottleBurst: 1}, efs.ErrThrottled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, emu := startAccounts(t, nil)
			emu.SetFault(emulator.OpAssumeRole, tt.fault)
			if tt.fault.ThrottleRate > 0 { // take the bucket's one token
				if _, err := asRole(t, base, otherRole, "").DescribeFileSystem(t.Context(), otherFS); err != nil {
					t.Fatal(err)
				}
				emu.ResetCounts()
			}
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			_, err := asRole(t, base, otherRole, "").DescribeFileSystem(ctx, otherFS)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), otherRole) {
				t.Fatalf("got %v, want %v naming the role", err, tt.want)
			}
			if n := emu.Counts()[emulator.OpAssumeRole]; n < 3 {
				t.Errorf("%d AssumeRole calls: want retries", n)
			}
		})
	}
}

// Config.RoleARN makes New's client the role's; the standard
// AWS_ENDPOINT_URL_STS is where it asks without Config.STSEndpoint. Not
// parallel: it sets the environment.
func TestNewWithRoleARN(t *testing.T) {
	url, _ := emulatortest.Start(t, emulator.Config{
		FileSystemOwners: map[string]string{otherFS: otherAccount},
		Roles:            []emulator.Role{{ARN: guardedRole, ExternalID: externalID}},
	})
	t.Setenv("AWS_ENDPOINT_URL_STS", url)
	c, _ := newClient(t, url, func(c *efs.Config) { c.RoleARN, c.ExternalID = guardedRole, externalID })
	if _, err := c.DescribeFileSystem(t.Context(), otherFS); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]efs.Config{
		"external ID without a role": {Region: "us-east-1", ExternalID: "x"},
		"malformed role ARN":         {Region: "us-east-1", RoleARN: "arn:aws:iam::1:user/x"},
	} {
		if _, err := efs.New(t.Context(), cfg); !errors.Is(err, efs.ErrBadRequest) {
			t.Errorf("%s: got %v, want ErrBadRequest", name, err)
		}
	}
}
