package lock_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeMatchesExamples keeps the README's code from rotting: every code
// block that README.md marks with "<!-- readme: NAME -->" must be, line for
// line, the code between "// readme:begin NAME" and "// readme:end" in the
// Examples of this package or of interceptor, which compile and run with checked output. A block
// changed on one side only fails here.
func TestReadmeMatchesExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)<!-- readme: (\\S+) -->\\s*```go\\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		blocks[m[1]] = m[2]
	}
	var files []string
	for _, pattern := range []string{"*_test.go", "interceptor/*_test.go"} {
		fs, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	examples := map[string]string{}
	begin := regexp.MustCompile(`(?s)\n[ \t]*// readme:begin (\S+)\n(.*?)\n[ \t]*// readme:end\n`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range begin.FindAllStringSubmatch(string(src), -1) {
			examples[m[1]] = strings.TrimRight(dedent(m[2]), "\n") + "\n"
		}
	}
	if len(blocks) == 0 {
		t.Fatal("README.md marks no code block")
	}
	for name, want := range examples {
		got, ok := blocks[name]
		if !ok {
			t.Errorf("README.md has no block marked %q, which the Examples define", name)
			continue
		}
		if got != want {
			t.Errorf("README block %q differs from its Example:\n--- README\n%s--- Example\n%s", name, got, want)
		}
	}
	for name := range blocks {
		if _, ok := examples[name]; !ok {
			t.Errorf("README block %q has no Example between readme:begin and readme:end", name)
		}
	}
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
