package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Untagged access points (enableTagging: "false") carry no tag at all, so
// nothing the protocol learns from a tag can be learned from them. What
// remains is the client token, which DescribeAccessPoints returns: the
// name lock of DeleteVolume and the proof of ownership for root removal are
// recovered from it (docs/design.md, "Untagged access points").
//
// Generation 0 sends the same token as a tagged class (the volume name, or
// a hash of it, or with reuseAccessPoint a hash of the claim name), which is
// also what the upstream driver sends. A tagged class's later generations
// use a hash (generationToken), which names nothing; an untagged class's use
// the reversible form
//
//	<stem>~<generation>
//
// where the stem is the generation-0 token when it has at most untaggedStemLen
// characters (every provisioner name, pvc-<uuid>, has 40) and otherwise the
// first untaggedStemLen hex digits of its SHA-256: within EFS's 64
// characters, never two volumes' stems alike, and '~' is in no Kubernetes
// object name, so a later generation's token is no provisioner's volume name.
const untaggedStemLen = volume.MaxClientTokenLength - len("~15")

// untaggedStem is the part of an untagged volume's later-generation tokens
// that its generation-0 token base determines.
func untaggedStem(base string) string {
	if len(base) <= untaggedStemLen {
		return base
	}
	sum := sha256.Sum256([]byte(base))
	return hex.EncodeToString(sum[:])[:untaggedStemLen]
}

// untaggedGenerationToken is generationToken for an untagged class.
func untaggedGenerationToken(base string, gen int) string {
	if gen == 0 {
		return base
	}
	return untaggedStem(base) + "~" + strconv.Itoa(gen)
}

// untaggedStemOf reads the stem back from a later generation's token; ok is
// false for a token of another form.
func untaggedStemOf(token string) (stem string, gen int, ok bool) {
	i := strings.LastIndexByte(token, '~')
	if i <= 0 || i > untaggedStemLen {
		return "", 0, false
	}
	g, err := strconv.Atoi(token[i+1:])
	if err != nil || g < 1 || g >= maxGenerations || strconv.Itoa(g) != token[i+1:] {
		return "", 0, false
	}
	return token[:i], g, true
}

// untaggedLockKeys are the name locks a create of an untagged class holds
// besides its own name's: the stem of its tokens. A DeleteVolume of one of
// its access points, which knows only the token, takes the same key.
func untaggedLockKeys(name, base string) []string {
	return []string{nameKey(name), nameKey(untaggedStem(base))}
}

// tokenLockKeys are the name locks DeleteVolume takes for an access point
// without a volume-name tag, from its client token alone. A token can be read
// more than one way (a volume named "a~1" sends "a~1" as generation 0; "a"
// sends it as generation 1), so every reading is locked: an extra key costs
// at most an ABORTED that the provisioner retries, a missing one would let a
// create and a delete of one volume interleave.
//   - the token itself: a generation-0 token that is the volume name, which
//     every create of that name holds (tagged classes, and the upstream
//     driver's access points, whose token is the name);
//   - its stem as a generation-0 token (untaggedStem), which an untagged
//     create holds;
//   - the stem of a later generation's token, which its untagged create holds.
func tokenLockKeys(token string) []string {
	if token == "" {
		return nil
	}
	keys := []string{nameKey(token), nameKey(untaggedStem(token))}
	if stem, _, ok := untaggedStemOf(token); ok {
		keys = append(keys, nameKey(stem))
	}
	return keys
}

// untaggedVolumeName is the volume name an untagged access point's token
// names, when it names one a provisioner makes (<prefix>-<lowercase UUID>):
// its generation-0 token, or the stem of a later generation's. "" otherwise
// (a hashed token, a reuseAccessPoint claim hash, anything made by hand).
func untaggedVolumeName(token string) string {
	if stem, _, ok := untaggedStemOf(token); ok {
		token = stem
	}
	if upstreamVolumeName.MatchString(token) {
		return token
	}
	return ""
}
