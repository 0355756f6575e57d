// Package docs is Baton's manual, in Markdown. Its test checks that every
// relative link in the repository's Markdown files resolves: the file or
// folder it names exists, and an anchor it names is a heading (or an explicit
// id) of the Markdown file it points into, as GitHub renders it.
package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

func TestMarkdownLinksResolve(t *testing.T) {
	root := repoRoot(t)
	broken, checked, err := brokenLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatalf("no relative links found in the Markdown under %s", root)
	}
	for _, b := range broken {
		t.Error(b)
	}
	t.Logf("%d relative links checked", checked)
}

func TestBrokenLinksAreReported(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pkg/README.md", "# Package\n\n## Fair queue, and `tickets`\n\nText.\n\nSetext heading\n---\n")
	write("pkg/code.go", "package pkg\n")
	guide := []string{ // one line each
		"# Guide", // line 1
		"## Step",
		"## Step",
		`<a id="here"></a>`,
		"[ok](../pkg/README.md) [ok](../pkg/README.md#fair-queue-and-tickets) [ok](../pkg/#package)", // line 5
		"[ok](../pkg/README.md#setext-heading) [ok](#step-1) [ok](#here) [ok](/pkg/code.go#L1)",
		`![ok](../pkg/code.go "title") [ok][ref] <img src="../pkg/code.go"> [ok](https://example.com/x)`,
		"[`code [in] text`](../pkg/code.go)",
		"",
		"[ref]: ../pkg/README.md", // line 10
		"```sh",
		"[not a link](nowhere.md)",
		"```",
		"`[nor this](nowhere.md)` <!-- [nor](nowhere.md) -->",
		"[bad file](../pkg/missing.md)", // line 15
		"[bad anchor](../pkg/README.md#fair-queue)",
		"[bad own anchor](#step-2)",
		`<a href="../nowhere/">bad html</a>`,
		"[outside](../../elsewhere.md)",
		"", // line 20
		"[bad ref]: ./gone.md",
	}
	write("docs/guide.md", strings.Join(guide, "\n"))
	broken, checked, err := brokenLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`docs/guide.md:15: link "../pkg/missing.md": no such file or folder`,
		`docs/guide.md:16: link "../pkg/README.md#fair-queue": no heading with anchor #fair-queue in README.md`,
		`docs/guide.md:17: link "#step-2": no heading with anchor #step-2 in guide.md`,
		`docs/guide.md:18: link "../nowhere/": no such file or folder`,
		`docs/guide.md:19: link "../../elsewhere.md": points outside the repository`,
		`docs/guide.md:21: link "./gone.md": no such file or folder`,
	}
	if strings.Join(broken, "\n") != strings.Join(want, "\n") {
		t.Errorf("got broken links:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
	if checked != 17 {
		t.Errorf("checked %d links, want 17", checked)
	}
}

// brokenLinks checks every relative link of the Markdown files under root and
// returns one line per link that does not resolve ("file:line: link ...:
// why"), and how many links it checked.
func brokenLinks(root string) (broken []string, checked int, err error) {
	files, err := markdownFiles(root)
	if err != nil {
		return nil, 0, err
	}
	anchors := map[string]map[string]bool{} // Markdown file -> its anchors, read once
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(src))
		anchors[path] = a
		return a, nil
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			return nil, 0, err
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range markdownLinks(string(src)) {
			checked++
			if why := resolve(root, file, l.target, anchorsOf); why != "" {
				broken = append(broken, fmt.Sprintf("%s:%d: link %q: %s", filepath.ToSlash(rel), l.line, l.target, why))
			}
		}
	}
	return broken, checked, nil
}

// repoRoot is the module's root: the nearest folder above the test's that
// holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// markdownFiles lists the repository's Markdown files, leaving out hidden
// folders (.git), test fixtures and third-party trees.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.EqualFold(filepath.Ext(path), ".md") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// link is a link's destination as written, and the line it is on.
type link struct {
	target string
	line   int
}

var (
	fence     = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	refDef    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	htmlLink  = regexp.MustCompile(`(?i)<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']`)
	hasScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// markdownLinks returns the relative links of a Markdown document: inline
// links and images, reference definitions, and the href and src of HTML a
// and img tags, outside code blocks, code spans and HTML comments. Links
// with a scheme (https:, mailto:) or to another host (//host) are left out.
func markdownLinks(src string) []link {
	var out []link
	add := func(target string, line int) {
		target = strings.TrimSpace(target)
		if strings.HasPrefix(target, "<") && strings.HasSuffix(target, ">") {
			target = target[1 : len(target)-1]
		}
		if hasScheme.MatchString(target) || strings.HasPrefix(target, "//") {
			return
		}
		out = append(out, link{target: target, line: line})
	}
	for n, text := range proseLines(src) {
		if text == "" {
			continue
		}
		if m := refDef.FindStringSubmatch(text); m != nil {
			add(m[1], n+1)
			continue
		}
		for _, m := range htmlLink.FindAllStringSubmatch(text, -1) {
			add(m[1], n+1)
		}
		for _, target := range inlineTargets(text) {
			add(target, n+1)
		}
	}
	return out
}

// proseLines is src split into lines, with fenced code blocks, HTML comments
// and code spans blanked out, so that what they show is never taken for a
// link or a heading.
func proseLines(src string) []string {
	lines := strings.Split(src, "\n")
	var open string // the fence of the code block we are in, if any
	comment := false
	for i, l := range lines {
		if open != "" {
			if m := fence.FindStringSubmatch(l); m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) &&
				strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), m[1][:1])) == "" {
				open = ""
			}
			lines[i] = ""
			continue
		}
		if m := fence.FindStringSubmatch(l); m != nil && !comment {
			open = m[1]
			lines[i] = ""
			continue
		}
		var b strings.Builder
		for len(l) > 0 {
			if comment {
				end := strings.Index(l, "-->")
				if end < 0 {
					l = ""
					break
				}
				l, comment = l[end+3:], false
				continue
			}
			start := strings.Index(l, "<!--")
			if start < 0 {
				b.WriteString(l)
				break
			}
			b.WriteString(l[:start])
			l, comment = l[start+4:], true
		}
		lines[i] = withoutCodeSpans(b.String())
	}
	return lines
}

// withoutCodeSpans blanks the code spans of one line: a run of backticks up to
// the next run of the same length.
func withoutCodeSpans(l string) string {
	var b strings.Builder
	for i := 0; i < len(l); {
		if l[i] != '`' {
			b.WriteByte(l[i])
			i++
			continue
		}
		j := i
		for j < len(l) && l[j] == '`' {
			j++
		}
		ticks := l[i:j]
		end := -1
		for k := j; k < len(l); {
			if l[k] != '`' {
				k++
				continue
			}
			m := k
			for m < len(l) && l[m] == '`' {
				m++
			}
			if m-k == len(ticks) {
				end = m
				break
			}
			k = m
		}
		if end < 0 { // no closing run: the backticks are text
			b.WriteString(ticks)
			i = j
			continue
		}
		b.WriteString(strings.Repeat(" ", end-i))
		i = end
	}
	return b.String()
}

// inlineTargets returns the destinations of the inline links and images of
// one line: "[text](destination "title")", text possibly holding brackets.
func inlineTargets(l string) []string {
	var out []string
	for i := 0; i+1 < len(l); i++ {
		if l[i] != ']' || l[i+1] != '(' || !opened(l[:i]) {
			continue
		}
		rest := strings.TrimLeft(l[i+2:], " \t")
		if strings.HasPrefix(rest, "<") {
			if end := strings.IndexByte(rest, '>'); end > 0 {
				out = append(out, rest[1:end])
			}
			continue
		}
		depth, end := 0, -1
		for k, c := range rest {
			switch {
			case c == '(':
				depth++
			case c == ')' && depth == 0:
				end = k
			case c == ')':
				depth--
			case unicode.IsSpace(c) && depth == 0:
				end = k
			}
			if end >= 0 {
				break
			}
		}
		if end >= 0 {
			out = append(out, rest[:end])
		}
	}
	return out
}

// opened reports whether s (the line before a "]") has the "[" that opens it.
func opened(s string) bool {
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ']':
			depth++
		case '[':
			if depth == 0 {
				return true
			}
			depth--
		}
	}
	return false
}

// resolve reports why target, a link in the Markdown file from, does not
// resolve, or "" when it does.
func resolve(root, from, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if target == "" {
		return "empty destination"
	}
	path, frag, _ := strings.Cut(target, "#")
	if q := strings.IndexByte(path, '?'); q >= 0 {
		path = path[:q]
	}
	p, err := url.PathUnescape(path)
	if err != nil {
		return "malformed escape: " + err.Error()
	}
	var dest string
	switch {
	case p == "":
		dest = from
	case strings.HasPrefix(p, "/"): // GitHub resolves these from the repository's root
		dest = filepath.Join(root, filepath.FromSlash(p))
	default:
		dest = filepath.Join(filepath.Dir(from), filepath.FromSlash(p))
	}
	if r, err := filepath.Rel(root, dest); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "points outside the repository"
	}
	fi, err := os.Stat(dest)
	if err != nil {
		return "no such file or folder"
	}
	if frag == "" {
		return ""
	}
	if fi.IsDir() { // GitHub shows the folder's README
		dest = filepath.Join(dest, "README.md")
		if _, err := os.Stat(dest); err != nil {
			return "anchor into a folder without a README.md"
		}
	}
	if !strings.EqualFold(filepath.Ext(dest), ".md") {
		return "" // anchors into source files (#L10) are GitHub's line links
	}
	a, err := anchorsOf(dest)
	if err != nil {
		return err.Error()
	}
	f, err := url.PathUnescape(frag)
	if err != nil {
		return "malformed escape in anchor: " + err.Error()
	}
	if !a[f] {
		return fmt.Sprintf("no heading with anchor #%s in %s", f, filepath.Base(dest))
	}
	return ""
}

var (
	atxHeading    = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine    = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	explicitID    = regexp.MustCompile(`(?i)<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']`)
	inlineLinkTxt = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag       = regexp.MustCompile(`<[^>]+>`)
)

// headingAnchors returns the anchors GitHub gives a Markdown document: one per
// heading (ATX or setext), made by slug, numbered -1, -2, ... when repeated,
// and every explicit id or name of an HTML tag.
func headingAnchors(src string) map[string]bool {
	raw := strings.Split(src, "\n")
	lines := proseLines(src)
	anchors := map[string]bool{}
	seen := map[string]int{}
	addHeading := func(text string) {
		s := slug(text)
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	for i, l := range lines {
		for _, m := range explicitID.FindAllStringSubmatch(raw[i], -1) {
			anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			// The heading's text with its code spans back (they were blanked).
			text := raw[i]
			if r := atxHeading.FindStringSubmatch(text); r != nil {
				text = r[2]
			}
			addHeading(text)
			continue
		}
		if i > 0 && setextLine.MatchString(l) && strings.TrimSpace(lines[i-1]) != "" &&
			!atxHeading.MatchString(lines[i-1]) && !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "|") &&
			(strings.HasPrefix(strings.TrimSpace(l), "=") || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "-")) {
			if i < 2 || strings.TrimSpace(lines[i-2]) == "" {
				addHeading(raw[i-1])
			}
		}
	}
	return anchors
}

// slug is GitHub's anchor for a heading's text: the text as rendered (links
// by their text, no tags, no backticks), lower-cased, without characters
// other than letters, marks, digits, '_', '-' and spaces, spaces turned into
// hyphens.
func slug(heading string) string {
	text := inlineLinkTxt.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
