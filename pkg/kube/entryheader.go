package kube

import (
	"encoding/json"
	"strings"
)

// An entry's header line is JSON (entryHeader), written and read on every
// operation a write applies. What encodeEntry writes is almost always
// plain: a kind, a file system ID, a volume name or id, an access point
// ID and a version, all printable ASCII. For those, the header is written
// and read here by hand, byte for byte what encoding/json writes and with
// what it reads (FuzzEntryHeader); anything else goes through
// encoding/json. In a storm, encoding/json's reflection on these two small
// structs was a third of the cost of applying a batch to its shard.

// appendHeader appends h as json.Marshal writes it, if every string of h
// is plain; ok false (nothing appended) otherwise.
func appendHeader(b []byte, h *entryHeader) (_ []byte, ok bool) {
	if !plain(h.Kind) || !plain(h.FileSystem) || !plain(h.Name) || !plain(h.Index) || !plain(h.Version) {
		return b, false
	}
	b = append(append(append(b, `{"k":"`...), h.Kind...), `","f":"`...)
	b = append(append(b, h.FileSystem...), '"')
	if h.Name != "" {
		b = append(append(append(b, `,"n":"`...), h.Name...), '"')
	}
	if h.NameB64 {
		b = append(b, `,"nb":true`...)
	}
	if h.Index != "" {
		b = append(append(append(b, `,"i":"`...), h.Index...), '"')
	}
	b = append(append(append(b, `,"v":"`...), h.Version...), '"')
	if h.ValueB64 {
		b = append(b, `,"vb":true`...)
	}
	return append(b, '}'), true
}

// plain reports whether json.Marshal writes s as it is: printable ASCII
// but for the quote, the backslash and what it escapes for HTML.
func plain(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// parseHeader reads a header line into h as json.Unmarshal does.
func parseHeader(line string, h *entryHeader) error {
	if parsePlainHeader(line, h) {
		return nil
	}
	*h = entryHeader{}
	return json.Unmarshal([]byte(line), h)
}

// parsePlainHeader reads line if it is an object of entryHeader's own keys
// (as written, no space) holding plain strings, or true for the flags; ok
// false (h untouched) for anything else, which json.Unmarshal reads.
func parsePlainHeader(line string, h *entryHeader) (ok bool) {
	s, found := strings.CutPrefix(line, "{")
	if !found {
		return false
	}
	if s, found = strings.CutSuffix(s, "}"); !found {
		return false
	}
	var out entryHeader
	for first := true; s != ""; first = false {
		if !first {
			if s, found = strings.CutPrefix(s, ","); !found {
				return false
			}
		}
		var key string
		if key, s, found = cutString(s); !found {
			return false
		}
		if s, found = strings.CutPrefix(s, ":"); !found {
			return false
		}
		switch key {
		case "nb", "vb":
			if s, found = strings.CutPrefix(s, "true"); !found {
				return false
			}
			out.NameB64, out.ValueB64 = out.NameB64 || key == "nb", out.ValueB64 || key == "vb"
			continue
		}
		var v string
		if v, s, found = cutString(s); !found || !plain(v) {
			return false
		}
		switch key {
		case "k":
			out.Kind = v
		case "f":
			out.FileSystem = v
		case "n":
			out.Name = v
		case "i":
			out.Index = v
		case "v":
			out.Version = v
		default:
			return false
		}
	}
	*h = out
	return true
}

// cutString cuts a JSON string without escapes from the start of s.
func cutString(s string) (v, rest string, ok bool) {
	if s, ok = strings.CutPrefix(s, `"`); !ok {
		return "", s, false
	}
	i := strings.IndexByte(s, '"')
	if i < 0 || strings.IndexByte(s[:i], '\\') >= 0 {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}
