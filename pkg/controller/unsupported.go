package controller

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotSupported: the request asks for an upstream feature this driver does
// not have yet; nothing was created or deleted.
var ErrNotSupported = errors.New("not supported by this driver yet")

// crossAccountSecrets are the provisioner-secret keys with which upstream
// provisions in another account (its role) or marks the volume so.
var crossAccountSecrets = []string{"awsRoleArn", "externalId", "crossaccount"}

// refuseCrossAccount refuses a call whose provisioner secrets ask for another
// account: acting in this controller's own account instead would create the
// volume in the wrong account, or (on delete) find nothing there, answer OK
// and leak the access point in the other.
func refuseCrossAccount(secrets map[string]string) error {
	for _, k := range crossAccountSecrets {
		if _, ok := secrets[k]; ok {
			return fmt.Errorf("%w: cross-account provisioning (provisioner secret key %s)", ErrNotSupported, k)
		}
	}
	return nil
}

// refuseS3Files refuses to delete an S3 Files volume: answering OK for an ID
// this driver cannot act on would drop the PV and leak its access point.
func refuseS3Files(volumeID string) error {
	if strings.HasPrefix(volumeID, "s3files:") {
		return fmt.Errorf("%w: S3 Files volumes (%s); the PV is kept so that its access point is not leaked", ErrNotSupported, volumeID)
	}
	return nil
}
