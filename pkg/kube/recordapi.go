package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelJournalOwner labels every object of the record (its Leases) with
// the driver that owns it: what List selects by.
const LabelJournalOwner = "efs.csi.aws.com/journal-owner"

// maxListRestarts bounds the Lists started again after their continue token
// expired.
const maxListRestarts = 3

// labelValueOf is owner when it is a valid label value (a driver name such
// as efs.csi.aws.com is); else its valid characters with a hash of it, so
// that two owners do not share a label value.
func labelValueOf(owner string) string {
	if len(content.IsLabelValue(owner)) == 0 {
		return owner
	}
	sum := sha256.Sum256([]byte(owner))
	clean := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '-' || r == '_' || r == '.' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return r
		}
		return '-'
	}, owner)
	clean = strings.Trim(clean[:min(len(clean), 54)], "-_.")
	if clean == "" {
		clean = "owner"
	}
	return clean + "-" + hex.EncodeToString(sum[:4])
}

// unavailable reports whether err leaves the outcome of a call unknown: the
// API server did not answer (a transport error, the context's end, the
// client's rate limiter), or answered that it could not serve.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	switch code := st.Status().Code; {
	case code >= 500, code == http.StatusTooManyRequests, code == http.StatusRequestTimeout:
		return true
	}
	switch st.Status().Reason {
	case metav1.StatusReasonServerTimeout, metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests,
		metav1.StatusReasonInternalError, metav1.StatusReasonServiceUnavailable:
		return true
	}
	return false
}

// listExpired reports whether a paged List must start over because its
// continue token expired, while it has restarts left; it counts one and
// clears the token.
func listExpired(err error, opts *metav1.ListOptions, restarts *int) bool {
	if err == nil || opts.Continue == "" || !(apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) || *restarts >= maxListRestarts {
		return false
	}
	*restarts++
	opts.Continue = ""
	return true
}
