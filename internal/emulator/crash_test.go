package emulator_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
)

// childDirEnv makes the test binary an emulator process on that data dir
// (see TestMain): the crash test kills it with SIGKILL.
const (
	childDirEnv = "EFS_EMULATOR_TEST_CHILD_DIR"
	childFS     = "fs-00000000000000c1a"
)

func runChildEmulator(dir string) {
	e, err := emulator.New(emulator.Config{DataDir: dir, FileSystems: []string{childFS}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("listening %s\n", l.Addr())
	_ = e.Serve(l)
	os.Exit(0)
}

// startChild runs an emulator process on dir and returns its endpoint.
func startChild(t *testing.T, dir string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("emulator process said %q (%v)", line, err)
	}
	return "http://" + addr, cmd
}

// Every answered change is on disk: killing the process (no Close, no
// flush) loses nothing that a client was told about.
func TestStateSurvivesACrash(t *testing.T) {
	emulatorOnly(t)
	dir := t.TempDir()
	url, cmd := startChild(t, dir)
	c := newClient(url, 1)
	ctx := context.Background()
	var made []string
	for range 5 {
		out, err := c.CreateAccessPoint(ctx, apInput(childFS, withPath("/p")))
		if err != nil {
			t.Fatalf("CreateAccessPoint: %v", err)
		}
		made = append(made, *out.AccessPointId)
	}
	if _, err := c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(made[0])}); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	url, _ = startChild(t, dir)
	v := &env{t: t, url: url, efs: newClient(url, 1)}
	if got := ids(v.listAll(childFS, 0)); !slices.Equal(got, made[1:]) {
		t.Fatalf("after the crash the file system lists %v, want %v", got, made[1:])
	}
}

func TestStateSurvivesARestart(t *testing.T) {
	emulatorOnly(t)
	ctx := context.Background()
	cfg := emulator.Config{DataDir: t.TempDir(), FileSystems: []string{"fs-0123456789abcdef0"}}
	url, emu := emulatortest.Start(t, cfg)
	v := &env{t: t, url: url, emu: emu, efs: newClient(url, 1)}
	fsID := v.fileSystem()
	mt, err := v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: aws.String(fsID), SubnetId: aws.String("subnet-0a")})
	if err != nil {
		t.Fatalf("CreateMountTarget: %v", err)
	}
	var made []string
	var tokens []string
	for i := range 12 {
		out := v.mustCreateAP(fsID, withTags("Name", fmt.Sprint("ap", i)), withPath("/v"), withCreationInfo(1, 1, "700"))
		made, tokens = append(made, *out.AccessPointId), append(tokens, *out.ClientToken)
	}
	if _, err := v.efs.TagResource(ctx, &efs.TagResourceInput{ResourceId: aws.String(made[1]),
		Tags: []types.Tag{{Key: aws.String("Name"), Value: aws.String("renamed")}}}); err != nil {
		t.Fatalf("TagResource: %v", err)
	}
	if _, err := v.efs.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(made[0])}); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	page, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(5)})
	if err != nil {
		t.Fatalf("DescribeAccessPoints: %v", err)
	}
	if err := emu.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	url, emu = emulatortest.Start(t, cfg)
	v = &env{t: t, url: url, emu: emu, efs: newClient(url, 1)}
	aps := v.listAll(fsID, 0)
	if got := ids(aps); !slices.Equal(got, made[1:]) {
		t.Fatalf("after restart the file system lists %v, want %v", got, made[1:])
	}
	if aws.ToString(aps[0].Name) != "renamed" || aws.ToString(aps[0].RootDirectory.CreationInfo.Permissions) != "700" {
		t.Errorf("first access point after restart: name %q, creation info %+v", aws.ToString(aps[0].Name), aps[0].RootDirectory.CreationInfo)
	}
	// A NextToken from before the restart continues where it stopped.
	rest, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID), NextToken: page.NextToken})
	if err != nil || !slices.Equal(ids(rest.AccessPoints), made[6:]) {
		t.Fatalf("NextToken after restart: %v %v, want %v", err, ids(rest.AccessPoints), made[6:])
	}
	// Tokens are still taken; the deleted one is free.
	_, err = v.createAP(apInput(fsID, withToken(tokens[5])))
	if ae := asError[*types.AccessPointAlreadyExists](t, err); *ae.AccessPointId != made[5] {
		t.Errorf("token after restart names %s, want %s", *ae.AccessPointId, made[5])
	}
	v.mustCreateAP(fsID, withToken(tokens[0]))
	// New access points come after the old ones.
	last := v.mustCreateAP(fsID)
	if got := ids(v.listAll(fsID, 0)); got[len(got)-1] != *last.AccessPointId {
		t.Errorf("the newest access point is not listed last: %v", got)
	}
	mts, err := v.efs.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: aws.String(fsID)})
	if err != nil || len(mts.MountTargets) != 1 || *mts.MountTargets[0].MountTargetId != *mt.MountTargetId {
		t.Errorf("mount targets after restart: %v %+v", err, mts)
	}
	all, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{})
	if err != nil || len(all.FileSystems) != 2 {
		t.Errorf("file systems after restart: %v, %d, want 2 (the flag's, not made twice, and the API's)", err, len(all.FileSystems))
	}
}

func TestSecondEmulatorOnOneDataDirFailsInsteadOfHanging(t *testing.T) {
	emulatorOnly(t)
	dir := t.TempDir()
	emulatortest.Start(t, emulator.Config{DataDir: dir})
	if e, err := emulator.New(emulator.Config{DataDir: dir}); err == nil {
		_ = e.Close()
		t.Fatal("a second emulator opened a data dir in use")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]emulator.Config{
		"no data dir":              {},
		"malformed file system":    {DataDir: t.TempDir(), FileSystems: []string{"fs-XYZ"}},
		"negative limit":           {DataDir: t.TempDir(), AccessPointLimit: -1},
		"fault of an unknown op":   {DataDir: t.TempDir(), Faults: map[emulator.Op]emulator.Fault{"Nope": {ErrorRate: 1}}},
		"error rate above 1":       {DataDir: t.TempDir(), Faults: map[emulator.Op]emulator.Fault{emulator.AllOps: {ErrorRate: 1.5}}},
		"unknown lost answer mode": {DataDir: t.TempDir(), Faults: map[emulator.Op]emulator.Fault{emulator.OpCreateAccessPoint: {LostAnswerMode: "maybe"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if e, err := emulator.New(cfg); err == nil {
				_ = e.Close()
				t.Fatal("New accepted it")
			}
		})
	}
}
