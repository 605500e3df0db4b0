package emulator

import (
	"flag"
	"io"
	"reflect"
	"testing"
	"time"
)

func TestFaultFlagsBuildFaults(t *testing.T) {
	all := func(f Fault) map[Op]Fault {
		m := map[Op]Fault{}
		for _, op := range Ops() {
			m[op] = f
		}
		return m
	}
	withCreate := func(m map[Op]Fault, f Fault) map[Op]Fault { m[OpCreateAccessPoint] = f; return m }
	cases := []struct {
		name string
		args []string
		want map[Op]Fault
	}{
		{"latency with jitter", []string{"--latency", "CreateAccessPoint=50ms~20ms"},
			map[Op]Fault{OpCreateAccessPoint: {Latency: 50 * time.Millisecond, Jitter: 20 * time.Millisecond}}},
		{"throttle with burst", []string{"--throttle", "DescribeAccessPoints=2.5:4"},
			map[Op]Fault{OpDescribeAccessPoints: {ThrottleRate: 2.5, ThrottleBurst: 4}}},
		{"error rate", []string{"--error-rate", "DeleteAccessPoint=0.1"}, map[Op]Fault{OpDeleteAccessPoint: {ErrorRate: 0.1}}},
		{"lost answer dropping", []string{"--lost-answer-rate", "CreateAccessPoint=1:drop"},
			map[Op]Fault{OpCreateAccessPoint: {LostAnswerRate: 1, LostAnswerMode: LostDrop}}},
		{"visibility delay without op", []string{"--visibility-delay", "2s"}, map[Op]Fault{OpCreateAccessPoint: {VisibilityDelay: 2 * time.Second}}},
		{"random throttle on every op", []string{"--throttle-random", "*=0.05"}, all(Fault{RandomThrottleRate: 0.05})},
		{"the fault proxy storm: random throttles and errors everywhere, mutations' answers lost as 500",
			[]string{"--throttle-random", "*=0.05", "--error-rate", "*=0.03", "--lost-answer-rate", "CreateAccessPoint=0.15:500"},
			withCreate(all(Fault{RandomThrottleRate: 0.05, ErrorRate: 0.03}),
				Fault{RandomThrottleRate: 0.05, ErrorRate: 0.03, LostAnswerRate: 0.15, LostAnswerMode: Lost500})},
		{"star expands, a later flag refines one op", []string{"--latency", "*=10ms", "--error-rate", "CreateAccessPoint=0.5"},
			withCreate(all(Fault{Latency: 10 * time.Millisecond}), Fault{Latency: 10 * time.Millisecond, ErrorRate: 0.5})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[Op]Fault{}
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			RegisterFaultFlags(fs, got)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("faults %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestFaultFlagsRejectNonsense(t *testing.T) {
	for _, args := range [][]string{
		{"--latency", "50ms"},
		{"--latency", "Nope=50ms"},
		{"--latency", "CreateAccessPoint=fast"},
		{"--latency", "CreateAccessPoint=-1s"},
		{"--throttle", "CreateAccessPoint=x"},
		{"--throttle", "CreateAccessPoint=1:-2"},
		{"--error-rate", "CreateAccessPoint=1.5"},
		{"--throttle-random", "CreateAccessPoint=1.5"},
		{"--throttle-random", "*=-0.1"},
		{"--throttle-random", "CreateAccessPoint=often"},
		{"--lost-answer-rate", "CreateAccessPoint=0.5:sometimes"},
		{"--visibility-delay", "CreateAccessPoint=later"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		RegisterFaultFlags(fs, map[Op]Fault{})
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// Refine is what the flags do one aspect at a time: each aspect the finer
// fault sets replaces the coarser one's, the others stay.
func TestRefineReplacesTheAspectsTheFinerFaultSets(t *testing.T) {
	every := Fault{Latency: time.Millisecond, Jitter: time.Millisecond, RandomThrottleRate: 0.05, ErrorRate: 0.03,
		ThrottleRate: 10, ThrottleBurst: 5, LostAnswerRate: 0.1, LostAnswerMode: LostDrop}
	for _, tc := range []struct {
		name        string
		finer, want Fault
	}{
		{"nothing set keeps everything", Fault{}, every},
		{"a lost answer brings its mode", Fault{LostAnswerRate: 0.15},
			Fault{Latency: time.Millisecond, Jitter: time.Millisecond, RandomThrottleRate: 0.05, ErrorRate: 0.03,
				ThrottleRate: 10, ThrottleBurst: 5, LostAnswerRate: 0.15}},
		{"a bucket brings its burst", Fault{ThrottleRate: 20},
			Fault{Latency: time.Millisecond, Jitter: time.Millisecond, RandomThrottleRate: 0.05, ErrorRate: 0.03,
				ThrottleRate: 20, LostAnswerRate: 0.1, LostAnswerMode: LostDrop}},
		{"rates replace rates", Fault{RandomThrottleRate: 0.5, ErrorRate: 0.5, VisibilityDelay: time.Second},
			Fault{Latency: time.Millisecond, Jitter: time.Millisecond, RandomThrottleRate: 0.5, ErrorRate: 0.5,
				ThrottleRate: 10, ThrottleBurst: 5, LostAnswerRate: 0.1, LostAnswerMode: LostDrop, VisibilityDelay: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := every.Refine(tc.finer); got != tc.want {
				t.Errorf("Refine(%+v) = %+v, want %+v", tc.finer, got, tc.want)
			}
		})
	}
}

func TestAccountFlags(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr bool
		check   func(Config) bool
	}{
		{name: "role with external ID", args: []string{"--role", "arn:aws:iam::111122223333:role/a/b+=,.@-#ext:1/=x"},
			check: func(c Config) bool {
				return len(c.Roles) == 1 && c.Roles[0] == Role{ARN: "arn:aws:iam::111122223333:role/a/b+=,.@-", ExternalID: "ext:1/=x"}
			}},
		{name: "role without", args: []string{"--role", "arn:aws:iam::111122223333:role/r"},
			check: func(c Config) bool { return len(c.Roles) == 1 && c.Roles[0].ExternalID == "" }},
		{name: "access key and owner", args: []string{"--access-key", "AKIDX=111122223333", "--file-system-owner", "fs-0123456789abcdef0=111122223333"},
			check: func(c Config) bool {
				return c.AccessKeyAccounts["AKIDX"] == "111122223333" && c.FileSystemOwners["fs-0123456789abcdef0"] == "111122223333"
			}},
		{name: "role ARN of no account", args: []string{"--role", "arn:aws:iam::1:role/r"}, wantErr: true},
		{name: "user ARN", args: []string{"--role", "arn:aws:iam::111122223333:user/r"}, wantErr: true},
		{name: "owner account not 12 digits", args: []string{"--file-system-owner", "fs-0123456789abcdef0=abc"}, wantErr: true},
		{name: "owner of a malformed ID", args: []string{"--file-system-owner", "fs-XYZ=111122223333"}, wantErr: true},
		{name: "access key without account", args: []string{"--access-key", "AKIDX"}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var cfg Config
			RegisterAccountFlags(fs, &cfg)
			err := fs.Parse(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q): %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err == nil && !tt.check(cfg) {
				t.Errorf("Parse(%q) gave %+v", tt.args, cfg)
			}
		})
	}
}

func TestOneZoneFlagBuildsZonesAndRejectsNonsense(t *testing.T) {
	got := map[string]string{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	RegisterOneZoneFlag(fs, got)
	if err := fs.Parse([]string{"--one-zone-file-system", "fs-0123456789abcdef0=us-east-1b", "--one-zone-file-system", "fs-0123456789abcdef1=us-east-1f"}); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"fs-0123456789abcdef0": "us-east-1b", "fs-0123456789abcdef1": "us-east-1f"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("zones %v, want %v", got, want)
	}
	for _, v := range []string{"fs-0123456789abcdef0", "fs-0123456789abcdef0=eu-west-1a", "fs-xyz=us-east-1a", "fs-0123456789abcdef0=us-east-1c"} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		RegisterOneZoneFlag(fs, got) // the last one names an existing file system in another zone
		if err := fs.Parse([]string{"--one-zone-file-system", v}); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}
