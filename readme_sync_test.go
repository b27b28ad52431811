package lock_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The Markdown files whose marked code blocks are kept equal to the
// Examples, and whose links must resolve.
var markdownFiles = []string{"README.md", "CHANGELOG.md", "docs/*.md", "bench/README.md"}

// TestReadmeMatchesExamples keeps the documentation's code from rotting:
// every code block that README.md or a page of docs/ marks with
// "<!-- readme: NAME -->" must be, line for line, the code between
// "// readme:begin NAME" and "// readme:end" in the Examples of this package
// or of interceptor, which compile and run with checked output. A block
// changed on one side only fails here, and so does a region no page shows.
func TestReadmeMatchesExamples(t *testing.T) {
	blocks := map[string]string{} // name → block
	where := map[string]string{}  // name → file
	for _, f := range globAll(t, "README.md", "docs/*.md") {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?s)<!-- readme: (\\S+) -->\\s*```go\\n(.*?)```").FindAllStringSubmatch(string(src), -1) {
			if prev, ok := where[m[1]]; ok {
				t.Errorf("%s and %s both mark a block %q", prev, f, m[1])
			}
			blocks[m[1]], where[m[1]] = m[2], f
		}
	}
	examples := exampleRegions(t)
	if len(blocks) == 0 {
		t.Fatal("README.md marks no code block")
	}
	for name, want := range examples {
		got, ok := blocks[name]
		if !ok {
			t.Errorf("no page marks a block %q, which the Examples define", name)
			continue
		}
		if got != want {
			t.Errorf("%s block %q differs from its Example:\n--- %[1]s\n%s--- Example\n%s", where[name], name, got, want)
		}
	}
	for name := range blocks {
		if _, ok := examples[name]; !ok {
			t.Errorf("%s block %q has no Example between readme:begin and readme:end", where[name], name)
		}
	}
}

// exampleRegions returns the code between "// readme:begin NAME" and
// "// readme:end" in the tests of this package and of interceptor, dedented.
func exampleRegions(t *testing.T) map[string]string {
	t.Helper()
	examples := map[string]string{}
	begin := regexp.MustCompile(`(?s)\n[ \t]*// readme:begin (\S+)\n(.*?)\n[ \t]*// readme:end\n`)
	for _, f := range globAll(t, "*_test.go", "interceptor/*_test.go") {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range begin.FindAllStringSubmatch(string(src), -1) {
			examples[m[1]] = strings.TrimRight(dedent(m[2]), "\n") + "\n"
		}
	}
	return examples
}

// TestReadmeGoBlocksCompiled: every ```go block of README.md, marked or
// not, is compiled. It must be, byte for byte once a common indentation is
// taken off, a run of whole lines of a Go file of this repository that the
// toolchain builds (with the build tag "long", which CI sets; not under
// testdata, not excluded by other build constraints). A block edited in the
// README alone, or whose source was deleted, fails here.
func TestReadmeGoBlocksCompiled(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no go block")
	}
	sources := compiledGoFiles(t)
	for _, b := range blocks {
		if f := findRegion(b.lines, sources); f == "" {
			t.Errorf("README.md:%d: this go block is not a region of any compiled Go file of the module; put it in an Example (between readme:begin and readme:end) or a test, and copy it byte for byte:\n%s",
				b.line, strings.Join(b.lines, "\n"))
		}
	}
}

type goBlock struct {
	line  int      // of the opening fence, 1-based
	lines []string // the code, without the fence's indentation
}

// goBlocks returns the fenced ```go blocks of a Markdown text, also those
// indented in a list item.
func goBlocks(md string) []goBlock {
	var blocks []goBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " \t")
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		indent := lines[i][:len(lines[i])-len(trimmed)]
		lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
		start := i
		var code []string
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "```" {
				break
			}
			code = append(code, strings.TrimPrefix(lines[i], indent))
		}
		if lang == "go" {
			blocks = append(blocks, goBlock{line: start + 1, lines: code})
		}
	}
	return blocks
}

// compiledGoFiles returns the lines of every .go file of this repository
// that the toolchain compiles with the tag "long", the nested modules'
// (etcdengine, bench: CI builds and tests each) included: testdata and
// directories the go command ignores (".", "_") are left out, and so are
// files whose build constraints exclude them.
func compiledGoFiles(t *testing.T) map[string][]string {
	t.Helper()
	ctx := build.Default
	ctx.BuildTags = append(ctx.BuildTags, "long")
	files := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			// Another module's files count too (etcdengine, bench): its own
			// CI step builds and tests them.
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		ok, err := ctx.MatchFile(filepath.Dir(path), d.Name())
		if err != nil || !ok {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[path] = strings.Split(string(src), "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	return files
}

// findRegion returns the first file (in name order) of which block is a
// run of whole lines once each of those lines loses one common indentation
// (empty lines excepted), or "".
func findRegion(block []string, files map[string][]string) string {
	for len(block) > 0 && strings.TrimSpace(block[len(block)-1]) == "" {
		block = block[:len(block)-1]
	}
	if len(block) == 0 || strings.TrimSpace(block[0]) == "" {
		return ""
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		lines := files[name]
		for i := 0; i+len(block) <= len(lines); i++ {
			l := lines[i]
			if !strings.HasSuffix(l, block[0]) {
				continue
			}
			indent := l[:len(l)-len(block[0])]
			if strings.Trim(indent, " \t") != "" {
				continue
			}
			if regionAt(lines[i:i+len(block)], block, indent) {
				return name
			}
		}
	}
	return ""
}

func regionAt(lines, block []string, indent string) bool {
	for j, want := range block {
		got := lines[j]
		if want == "" {
			if strings.TrimSpace(got) != "" {
				return false
			}
			continue
		}
		if got != indent+want {
			return false
		}
	}
	return true
}

// TestReadmeLinks: every relative link and image of README.md,
// CHANGELOG.md, docs/*.md and bench/README.md names a file or directory of
// the repository, and every #anchor a heading of the page it points into.
func TestReadmeLinks(t *testing.T) {
	link := regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	fence := regexp.MustCompile("(?s)```.*?```")
	code := regexp.MustCompile("`[^`\n]*`")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = headingAnchors(string(src))
		return anchors[path], nil
	}
	files := globAll(t, markdownFiles...)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := code.ReplaceAllString(fence.ReplaceAllString(string(src), ""), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if path == "" {
				path = f
			} else {
				path = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", f, target, path, anchor)
			}
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, punctuation dropped, spaces as hyphens, and
// "-1", "-2"… after repeats.
func headingAnchors(md string) map[string]bool {
	md = regexp.MustCompile("(?s)```.*?```").ReplaceAllString(md, "")
	linkText := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	seen := map[string]int{}
	anchors := map[string]bool{}
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		text = linkText.ReplaceAllString(strings.TrimSpace(text), "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// globAll expands the patterns, failing the test on a malformed one.
func globAll(t *testing.T, patterns ...string) []string {
	t.Helper()
	var files []string
	for _, pattern := range patterns {
		fs, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	return files
}

// dedent removes the indentation that all non-empty lines of s share.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	prefix := ""
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, "\t "))]
		if i == 0 || prefix == "" || strings.HasPrefix(prefix, ind) {
			prefix = ind
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.Join(lines, "\n")
}
