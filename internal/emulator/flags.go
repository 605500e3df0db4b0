package emulator

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
)

// RegisterFaultFlags defines the fault flags on fs; each use sets one aspect
// of the fault of the operations it names into faults ("*" names every
// operation, expanded at once, so a later flag for one operation refines it):
//
//	--latency OP=DUR[~JITTER]          e.g. CreateAccessPoint=50ms~20ms
//	--throttle OP=RATE[:BURST]         requests/second, e.g. '*=10:5'
//	--throttle-random OP=P             e.g. '*=0.05', whatever the rate
//	--error-rate OP=P                  e.g. DeleteAccessPoint=0.1
//	--lost-answer-rate OP=P[:500|:drop]
//	--visibility-delay [CreateAccessPoint=]DUR
//
// Every flag but --visibility-delay may be repeated.
func RegisterFaultFlags(fs *flag.FlagSet, faults map[Op]Fault) {
	for _, k := range faultKinds {
		fs.Var(&faultFlag{kind: k, faults: faults}, k.name, k.usage)
	}
}

type faultKind struct {
	name, usage string
	set         func(f *Fault, v string) error
}

var faultKinds = []faultKind{
	{"latency", "add latency to `OP=DUR[~JITTER]` (OP may be '*'); repeatable", func(f *Fault, v string) error {
		d, j, _ := strings.Cut(v, "~")
		var err error
		if f.Latency, err = time.ParseDuration(d); err != nil {
			return err
		}
		if j != "" {
			f.Jitter, err = time.ParseDuration(j)
		}
		return err
	}},
	{"throttle", "answer ThrottlingException past `OP=RATE[:BURST]` requests/second; repeatable", func(f *Fault, v string) error {
		r, b, _ := strings.Cut(v, ":")
		var err error
		if f.ThrottleRate, err = strconv.ParseFloat(r, 64); err != nil {
			return err
		}
		if b != "" {
			f.ThrottleBurst, err = strconv.Atoi(b)
		}
		return err
	}},
	{"throttle-random", "answer ThrottlingException, not applied, with probability `OP=P` whatever the request rate; repeatable", probabilityOf(func(f *Fault) *float64 { return &f.RandomThrottleRate })},
	{"error-rate", "answer InternalServerError, not applied, with probability `OP=P`; repeatable", probabilityOf(func(f *Fault) *float64 { return &f.ErrorRate })},
	{"lost-answer-rate", "apply, then lose the answer (500 or dropped connection) with probability `OP=P[:500|:drop]`; repeatable", func(f *Fault, v string) error {
		p, mode, _ := strings.Cut(v, ":")
		var err error
		f.LostAnswerRate, err = strconv.ParseFloat(p, 64)
		f.LostAnswerMode = LostMode(mode)
		return err
	}},
	{"visibility-delay", "hide new access points from DescribeAccessPoints for `DUR`", func(f *Fault, v string) error {
		var err error
		f.VisibilityDelay, err = time.ParseDuration(v)
		return err
	}},
}

// probabilityOf parses a flag's P into the field of a fault.
func probabilityOf(field func(*Fault) *float64) func(*Fault, string) error {
	return func(f *Fault, v string) error {
		p, err := strconv.ParseFloat(v, 64)
		*field(f) = p
		return err
	}
}

type faultFlag struct {
	kind   faultKind
	faults map[Op]Fault
	last   string
}

func (ff *faultFlag) String() string { return ff.last }

func (ff *faultFlag) Set(v string) error {
	opName, val, ok := strings.Cut(v, "=")
	if !ok {
		if ff.kind.name != "visibility-delay" {
			return fmt.Errorf("want OP=VALUE, got %q", v)
		}
		opName, val = string(OpCreateAccessPoint), v
	}
	op := Op(opName)
	ops := []Op{op}
	switch {
	case op == AllOps:
		ops = Ops()
	case !op.valid():
		return fmt.Errorf("unknown operation %q", opName)
	}
	for _, o := range ops {
		f := ff.faults[o]
		if err := ff.kind.set(&f, val); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		if err := f.Validate(); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		ff.faults[o] = f
	}
	ff.last = v
	return nil
}

// RegisterAccountFlags defines the account flags on fs, each repeatable,
// adding to cfg (docs/emulator.md, "Accounts and roles"):
//
//	--role ARN[#EXTERNAL_ID]            a role AssumeRole may assume ('#' is in
//	                                    neither an ARN nor an external ID)
//	--access-key KEY=ACCOUNT            a static access key ID's account
//	--file-system-owner fs-ID=ACCOUNT   create fs-ID if missing, owned by ACCOUNT
func RegisterAccountFlags(fs *flag.FlagSet, cfg *Config) {
	fs.Func("role", "a role `ARN[#EXTERNAL_ID]` callers may assume through STS AssumeRole; repeatable", func(v string) error {
		arn, ext, _ := strings.Cut(v, "#")
		r := Role{ARN: arn, ExternalID: ext}
		if _, _, err := parseRole(r); err != nil {
			return err
		}
		cfg.Roles = append(cfg.Roles, r)
		return nil
	})
	pair := func(v string, valid func(string) bool, what string) (string, string, error) {
		k, account, ok := strings.Cut(v, "=")
		if !ok || !valid(k) || !accountRE.MatchString(account) {
			return "", "", fmt.Errorf("want %s=ACCOUNT (12 digits), got %q", what, v)
		}
		return k, account, nil
	}
	fs.Func("access-key", "assign static access key ID `KEY=ACCOUNT` to an account; repeatable", func(v string) error {
		k, a, err := pair(v, accessKeyRE.MatchString, "KEY")
		if err != nil {
			return err
		}
		if cfg.AccessKeyAccounts == nil {
			cfg.AccessKeyAccounts = map[string]string{}
		}
		cfg.AccessKeyAccounts[k] = a
		return nil
	})
	fs.Func("file-system-owner", "create file system `fs-ID=ACCOUNT` if missing, owned by that account; repeatable", func(v string) error {
		id, a, err := pair(v, ValidFileSystemID, "fs-ID")
		if err != nil {
			return err
		}
		if cfg.FileSystemOwners == nil {
			cfg.FileSystemOwners = map[string]string{}
		}
		cfg.FileSystemOwners[id] = a
		return nil
	})
}

// RegisterOneZoneFlag defines --one-zone-file-system fs-ID=ZONE on fs
// (repeatable): each use adds a One Zone file system to zones
// (Config.OneZoneFileSystems).
func RegisterOneZoneFlag(fs *flag.FlagSet, zones map[string]string) {
	fs.Var(oneZoneFlag(zones), "one-zone-file-system",
		"create One Zone file system `fs-ID=ZONE` (e.g. fs-0123456789abcdef0=us-east-1b) at start if missing; repeatable")
}

type oneZoneFlag map[string]string

func (z oneZoneFlag) String() string {
	var parts []string
	for id, zone := range z {
		parts = append(parts, id+"="+zone)
	}
	return strings.Join(parts, ",")
}

func (z oneZoneFlag) Set(v string) error {
	id, zone, ok := strings.Cut(v, "=")
	switch {
	case !ok:
		return fmt.Errorf("want fs-ID=ZONE, got %q", v)
	case !ValidFileSystemID(id):
		return fmt.Errorf("%q is not a file system ID (fs- and 8 to 40 hex digits)", id)
	case !ValidZone(zone):
		return fmt.Errorf("%q is not an availability zone of %s (%sa to %s%c)", zone, region, region, region, maxZoneLetter)
	}
	if old, dup := z[id]; dup && old != zone {
		return fmt.Errorf("%s named in two zones, %s and %s", id, old, zone)
	}
	z[id] = zone
	return nil
}

// RegisterIAMFlag defines --iam-policy FILE on fs (repeatable): each file is
// one JSON identity policy of the principal every caller is
// (Config.IAMPolicies). A file that cannot be read, or is not a valid
// policy, is an error of the flag naming the file.
func RegisterIAMFlag(fs *flag.FlagSet, cfg *Config) {
	fs.Func("iam-policy", "evaluate every request under the IAM identity policy in JSON `FILE`; repeatable (none: allow everything)", func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err // names the file
		}
		if _, err := iam.Parse(b); err != nil {
			return err // the flag package's message names the file
		}
		cfg.IAMPolicies = append(cfg.IAMPolicies, string(b))
		return nil
	})
}
