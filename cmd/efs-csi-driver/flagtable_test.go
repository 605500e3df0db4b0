package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/efs-csi/efs-csi-driver/pkg/driver"
)

// docs/reference.md's flag tables are rendered from the FlagSet main parses: one row
// a flag (name, default, usage), in --help's order; klog's flags share one
// row. Between the markers <!-- flags:NAME:begin --> and
// <!-- flags:NAME:end --> nothing is written by hand.

var update = flag.Bool("update", false, "rewrite docs/reference.md's flag tables from the FlagSet")

const (
	readmePath = "../../docs/reference.md"
	regenerate = "make readme (go test ./cmd/efs-csi-driver -run TestREADMEFlagTables -update)"
)

func TestREADMEFlagTables(t *testing.T) {
	// Two defaults come from the environment upstream's chart sets: the
	// table shows the ones of an empty environment.
	t.Setenv("FIPS_ENABLED", "")
	t.Setenv("PORT_RANGE_UPPER_BOUND", "")
	var (
		cfg driver.Config
		o   options
	)
	fs, groups := newFlagSet(&cfg, &o)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := replaceRegions(readme, flagTables(groups))
	if err != nil {
		t.Fatalf("docs/reference.md: %v", err)
	}
	if *update {
		if err := os.WriteFile(readmePath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		readme = want
	}

	// Every flag has a row, and every row's flags exist.
	named := tableFlags(flagsSection(readme))
	fs.VisitAll(func(f *flag.Flag) {
		if !named[f.Name] {
			t.Errorf("README.md's Flags tables have no row for --%s; run %s", f.Name, regenerate)
		}
	})
	for name := range named {
		if fs.Lookup(name) == nil {
			t.Errorf("README.md's Flags tables name --%s, which efs-csi-driver does not define; run %s", name, regenerate)
		}
	}
	if !bytes.Equal(readme, want) {
		t.Errorf("README.md's flag tables differ from the FlagSet (name, default, usage); run %s\n%s",
			regenerate, lineDiff(readme, want))
	}
}

// flagTables are README.md's generated regions by name: the driver's flags
// with klog's in one row, and the node plugin's efs-utils flags.
func flagTables(g flagGroups) map[string]string {
	return map[string]string{
		"efs-csi-driver": flagTable(g.driver) + groupRow(g.klog,
			"klog's logging flags, as in the sidecars of the same pods (--help gives each one's default and meaning)"),
		"efs-utils": flagTable(g.efsUtils),
	}
}

const tableHead = "| flag | default | meaning |\n|---|---|---|\n"

// flagTable is a markdown table of fs's flags, one row each.
func flagTable(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString(tableHead)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" {
			def = "`" + strings.ReplaceAll(f.DefValue, "|", `\|`) + "`"
		}
		b.WriteString(row("`--"+f.Name+"`", def, markdownText(f.Usage)))
	})
	return b.String()
}

// groupRow is one row naming all of fs's flags, with meaning.
func groupRow(fs *flag.FlagSet, meaning string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "`--"+f.Name+"`") })
	return row(strings.Join(names, ", "), "", markdownText(meaning))
}

// row is a table row of cells.
func row(cells ...string) string {
	var b strings.Builder
	for _, c := range cells {
		b.WriteString("| " + c)
		if c != "" {
			b.WriteByte(' ')
		}
	}
	return b.String() + "|\n"
}

// markdownText escapes plain text for a markdown table cell: the cell's |,
// backslashes, and what would start a code span, emphasis or an HTML tag (an
// _ between letters or digits starts none).
func markdownText(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		switch c {
		case '\\', '|', '*', '`', '<':
			b.WriteByte('\\')
		case '_':
			if i == 0 || i == len(r)-1 || !isWord(r[i-1]) || !isWord(r[i+1]) {
				b.WriteByte('\\')
			}
		}
		b.WriteRune(c)
	}
	return b.String()
}

func isWord(c rune) bool { return unicode.IsLetter(c) || unicode.IsDigit(c) }

func markers(name string) (begin, end string) {
	return "<!-- flags:" + name + ":begin -->\n", "<!-- flags:" + name + ":end -->\n"
}

// replaceRegions replaces each named region's text between its markers.
func replaceRegions(doc []byte, regions map[string]string) ([]byte, error) {
	s := string(doc)
	for name, text := range regions {
		begin, end := markers(name)
		_, rest, ok := strings.Cut(s, begin)
		if !ok || strings.Count(s, begin) != 1 {
			return nil, fmt.Errorf("want exactly one %q", strings.TrimSpace(begin))
		}
		old, _, ok := strings.Cut(rest, end)
		if !ok {
			return nil, fmt.Errorf("no %q after %q", strings.TrimSpace(end), strings.TrimSpace(begin))
		}
		s = strings.Replace(s, begin+old+end, begin+text+end, 1)
	}
	return []byte(s), nil
}

// flagsSection is README.md's "### Flags" section, to the next heading.
func flagsSection(doc []byte) string {
	_, s, _ := strings.Cut(string(doc), "\n### Flags\n")
	if i := strings.Index(s, "\n#"); i >= 0 {
		s = s[:i]
	}
	return s
}

var rowFlag = regexp.MustCompile("`--([A-Za-z0-9_.-]+)`")

// tableFlags are the flags the first cells of section's table rows name.
func tableFlags(section string) map[string]bool {
	named := map[string]bool{}
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		for _, m := range rowFlag.FindAllStringSubmatch(cells[1], -1) {
			named[m[1]] = true
		}
	}
	return named
}

// lineDiff lists the lines only one of have (-) and want (+) has.
func lineDiff(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	var b strings.Builder
	b.WriteString("(-README.md +FlagSet)\n")
	for _, l := range h {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	for _, l := range w {
		if !slices.Contains(h, l) {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	return b.String()
}

func TestMarkdownText(t *testing.T) {
	for in, want := range map[string]string{
		`a|b`:                     `a\|b`,
		`tag\:name`:               `tag\\:name`,
		`fips_mode_enabled`:       `fips_mode_enabled`,
		`spaces and _.:/=+-@`:     `spaces and \_.:/=+-@`,
		`DIR/<fs-id>, "*" others`: `DIR/\<fs-id>, "\*" others`,
	} {
		if got := markdownText(in); got != want {
			t.Errorf("markdownText(%q) = %q, want %q", in, got, want)
		}
	}
}
