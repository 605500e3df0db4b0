// Package browsertest lays a report page out in headless Chromium at given
// window widths, as a person opens it, and checks what a person would see
// go wrong: an element wider than its container or reaching past the
// window (the page scrolls sideways, or text is cut off), a number not
// right-aligned or a text cell not left-aligned. It also takes a
// screenshot of each width. Tests skip, saying so, when Chromium is absent
// (.ci/run installs Debian's chromium).
package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Browser is the Chromium binary: $CHROMIUM, else chromium,
// chromium-browser or google-chrome on $PATH; "" if none.
func Browser() string {
	if b := os.Getenv("CHROMIUM"); b != "" {
		return b
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Layout is what the page's layout check found at one width.
type Layout struct {
	Width      int      `json:"width"`      // the window's inner width
	PageWidth  int      `json:"pageWidth"`  // the document's scroll width
	Elements   int      `json:"elements"`   // elements checked
	Cells      int      `json:"cells"`      // table cells whose alignment was checked
	Problems   []string `json:"problems"`   // what overflows or is misaligned
	Screenshot string   `json:"screenshot"` // the PNG taken at this width
}

// check runs in the page once it is laid out and writes its findings into
// the DOM, which --dump-dom prints.
const check = `<script>
(function () {
  var out = {width: window.innerWidth, pageWidth: document.documentElement.scrollWidth, elements: 0, cells: 0, problems: []};
  var num = /^[-+]?\d[\d,.]*\s?(%|µs|ms|s|m|h|x|vol\/s|MiB|KiB)?$/;
  function name(el) {
    var s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    if (el.className && typeof el.className === "string") s += "." + el.className.trim().split(/\s+/).join(".");
    var t = (el.textContent || "").trim().replace(/\s+/g, " ");
    return s + ' "' + t.slice(0, 50) + '"';
  }
  var all = document.body.querySelectorAll("*");
  for (var i = 0; i < all.length; i++) {
    var el = all[i];
    if (el.closest("svg") && el.tagName.toLowerCase() !== "svg") continue;
    var r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    out.elements++;
    var p = el.parentElement, pr = p.getBoundingClientRect();
    var pcs = getComputedStyle(p);
    var inner = pr.right - parseFloat(pcs.borderRightWidth || 0);
    if (r.right > inner + 1 || r.left < pr.left - 1) {
      out.problems.push(name(el) + ": " + Math.round(r.width) + " px wide at " + Math.round(r.left) + ".." + Math.round(r.right) +
        ", past its container " + name(p) + " at " + Math.round(pr.left) + ".." + Math.round(inner));
    } else if (r.right > window.innerWidth + 1) {
      out.problems.push(name(el) + ": reaches " + Math.round(r.right) + " px, past the window's " + window.innerWidth);
    }
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && el.tagName.toLowerCase() !== "svg") {
      out.problems.push(name(el) + ": its content is " + el.scrollWidth + " px wide in " + el.clientWidth + " px (cut off or scrolled)");
    }
    if (el.tagName === "TD") {
      out.cells++;
      var text = el.textContent.trim(), align = getComputedStyle(el).textAlign;
      var right = align === "right" || align === "end", left = align === "left" || align === "start";
      if (num.test(text) && !right) out.problems.push(name(el) + ": a number aligned " + align + ", want right");
      if (!num.test(text) && text !== "" && text !== "-" && !el.classList.contains("num") && !left) out.problems.push(name(el) + ": text aligned " + align + ", want left");
    }
  }
  if (out.pageWidth > window.innerWidth) out.problems.push("the page is " + out.pageWidth + " px wide in a " + window.innerWidth + " px window: it scrolls sideways");
  var pre = document.createElement("pre");
  pre.id = "browsertest-layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>`

// screenshotHeight is the screenshots' height: most of a report.
const screenshotHeight = 3000

// Check lays page (an HTML file) out at each width, 900 px high, saves a
// screenshot of each (screenshotHeight high) (in $EFS_CSI_SCREENSHOTS when set, else the test's
// temporary directory) and fails the test for each layout problem. It
// skips the test when there is no Chromium.
func Check(t *testing.T, page string, widths ...int) []Layout {
	t.Helper()
	browser := Browser()
	if browser == "" {
		t.Skip("no Chromium to lay the report out in (set $CHROMIUM, or apt-get install -y chromium, as .ci/run does)")
	}
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	shots := os.Getenv("EFS_CSI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	checked := filepath.Join(dir, "checked.html")
	withCheck := strings.Replace(string(src), "</body>", check+"</body>", 1)
	if err := os.WriteFile(checked, []byte(withCheck), 0o644); err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(filepath.Base(page), filepath.Ext(page))
	var out []Layout
	for _, w := range widths {
		dom := run(t, browser, dir, w, 900, "--dump-dom", "file://"+checked)
		_, after, ok := strings.Cut(dom, `<pre id="browsertest-layout">`)
		raw, _, ok2 := strings.Cut(after, "</pre>")
		if !ok || !ok2 {
			t.Fatalf("at %d px the layout check did not run; the page as dumped:\n%.2000s", w, dom)
		}
		var l Layout
		if err := json.Unmarshal([]byte(html.UnescapeString(raw)), &l); err != nil {
			t.Fatalf("at %d px: %v: %s", w, err, raw)
		}
		if l.Width != w {
			t.Errorf("the window is %d px wide, asked for %d", l.Width, w)
		}
		l.Screenshot = filepath.Join(shots, fmt.Sprintf("%s-%dpx.png", base, w))
		run(t, browser, dir, w, screenshotHeight, "--screenshot="+l.Screenshot, "--hide-scrollbars", "file://"+page)
		f, err := os.Open(l.Screenshot)
		if err != nil {
			t.Fatalf("no screenshot at %d px: %v", w, err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() != w || img.Bounds().Dy() != screenshotHeight {
			t.Errorf("screenshot %s: %v, %v wide, want %d", l.Screenshot, err, img.Bounds(), w)
		}
		t.Logf("%s at %d px: %d elements, %d cells checked, %d problems; screenshot %s", base, w, l.Elements, l.Cells, len(l.Problems), l.Screenshot)
		if l.Elements < 10 {
			t.Errorf("at %d px only %d elements were laid out", w, l.Elements)
		}
		for i, p := range l.Problems {
			if i == 30 {
				t.Errorf("at %d px: ... and %d more problems", w, len(l.Problems)-30)
				break
			}
			t.Errorf("at %d px: %s", w, p)
		}
		out = append(out, l)
	}
	return out
}

// run runs Chromium headless on a fresh profile in a window of width x
// height and returns its standard output.
func run(t *testing.T, browser, dir string, width, height int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	profile, err := os.MkdirTemp(dir, "profile-")
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-dev-shm-usage", // a container's small /dev/shm
		"--force-device-scale-factor=1", "--user-data-dir=" + profile, fmt.Sprintf("--window-size=%d,%d", width, height)}, args...)
	cmd := exec.CommandContext(ctx, browser, all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", browser, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
