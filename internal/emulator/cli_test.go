package emulator_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// The AWS CLI (botocore, another serializer than the Go SDK's) works against
// the endpoint too, found through AWS_ENDPOINT_URL_EFS. Skipped when the
// CLI is not installed.
func TestAWSCLIWorksWithEndpointURL(t *testing.T) {
	awsCLI, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("aws CLI not installed")
	}
	t.Parallel() // the CLI takes seconds to start

	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(awsCLI, append([]string{"efs"}, args...)...)
		cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL_EFS="+v.url, "AWS_ACCESS_KEY_ID=any", "AWS_SECRET_ACCESS_KEY=any",
			"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_MAX_ATTEMPTS=1")
		return cmd.CombinedOutput()
	}
	out, err := run("create-access-point", "--file-system-id", fsID, "--client-token", "cli-1",
		"--root-directory", "Path=/cli,CreationInfo={OwnerUid=1,OwnerGid=2,Permissions=750}", "--posix-user", "Uid=1,Gid=2",
		"--tags", "Key=Name,Value=from-cli")
	if err != nil {
		t.Fatalf("create-access-point: %v\n%s", err, out)
	}
	var created struct{ AccessPointId, Name string }
	if err := json.Unmarshal(out, &created); err != nil || created.Name != "from-cli" {
		t.Fatalf("create-access-point answered %s (%v)", out, err)
	}
	out, err = run("describe-access-points", "--file-system-id", fsID)
	if err != nil || !strings.Contains(string(out), created.AccessPointId) {
		t.Fatalf("describe-access-points: %v\n%s", err, out)
	}
}
