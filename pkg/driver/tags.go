package driver

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// EFS's limits on a tag (API_Tag): a key of 1 to 128 characters, a value
// of up to 256, both of letters, separators, digits and _ . : / = + - @; a
// key may not start with aws: (reserved). An access point has at most 50
// tags, of which the driver writes up to driverTags itself.
var (
	tagKeyRE   = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{1,128}$`)
	tagValueRE = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{0,256}$`)
)

const (
	maxTags    = 50
	driverTags = 8 // cluster, volume name, capacity, cluster ID, base path, claim name and namespace, record life
)

// ParseTags parses --tags as upstream does: tags are separated by spaces,
// and key from value by a colon; a backslash escapes a space, a colon or a
// backslash (upstream's docs: --tags='tag\:name:tag\:value' is the tag
// "tag:name" = "tag:value", and 'key\ with\ space:v' has a key with spaces).
// A tag without a colon has an empty value. As upstream, a tag with two
// unescaped colons is dropped; it is returned in dropped for the log. Empty
// tags (runs of spaces) are skipped.
//
// Every tag must be one EFS accepts (characters, lengths, no aws: prefix,
// at most 50 with the driver's own), so that a bad --tags fails the start
// rather than every CreateVolume.
func ParseTags(s string) (tags map[string]string, dropped []string, err error) {
	tags = map[string]string{}
	words, err := splitEscaped(strings.TrimSpace(s), ' ')
	if err != nil {
		return nil, nil, fmt.Errorf("--tags: %w", err)
	}
	for _, w := range words {
		if w == "" {
			continue
		}
		kv, err := splitEscaped(w, ':')
		if err != nil {
			return nil, nil, fmt.Errorf("--tags: %q: %w", w, err)
		}
		var k, v string
		switch len(kv) {
		case 1:
			k = kv[0]
		case 2:
			k, v = kv[0], kv[1]
		default:
			dropped = append(dropped, w)
			continue
		}
		switch {
		case !tagKeyRE.MatchString(k):
			return nil, nil, fmt.Errorf("--tags: key %q: EFS takes 1 to 128 letters, digits, spaces and _ . : / = + - @ (escape a space or colon with \\)", k)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, nil, fmt.Errorf("--tags: key %q: the aws: prefix is reserved", k)
		case !tagValueRE.MatchString(v):
			return nil, nil, fmt.Errorf("--tags: value %q of %q: EFS takes up to 256 letters, digits, spaces and _ . : / = + - @", v, k)
		}
		tags[k] = v
	}
	if len(tags) > maxTags-driverTags {
		return nil, nil, fmt.Errorf("--tags: %d tags: an access point has at most %d, and the driver writes up to %d", len(tags), maxTags, driverTags)
	}
	return tags, dropped, nil
}

// splitEscaped splits s at every sep not preceded by a backslash, and
// unescapes \sep and \\ (any other backslash is kept), as upstream's
// splitToList. A trailing lone backslash, which upstream cannot parse, is an
// error.
func splitEscaped(s string, sep byte) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("not UTF-8")
	}
	var out []string
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == sep:
			out = append(out, b.String())
			b.Reset()
		case c == '\\' && i+1 == len(s):
			return nil, fmt.Errorf("a trailing \\ escapes nothing")
		case c == '\\' && (s[i+1] == '\\' || s[i+1] == sep):
			b.WriteByte(s[i+1])
			i++
		default:
			b.WriteByte(c)
		}
	}
	return append(out, b.String()), nil
}
