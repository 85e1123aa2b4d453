package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goFileName is a file a package comment names: "wire.go",
// "worker/route.go".
var goFileName = regexp.MustCompile(`\b[a-z0-9_]+(?:/[a-z0-9_]+)*\.go\b`)

// TestDocFilesExist: every Go file a doc.go names exists (beside it, or
// under the module root or a parent directory for a path like
// "worker/route.go"), and a doc.go that lists its package's files
// ("Here: ...") names every non-test file of the package, so the list
// a newcomer reads is the package.
func TestDocFilesExist(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "doc.go" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(src)
		if i := strings.Index(text, "\npackage "); i >= 0 {
			text = text[:i]
		}
		dir := filepath.Dir(path)
		rel, _ := filepath.Rel(root, path)
		named := goFileName.FindAllString(text, -1)
		for _, f := range named {
			if !existsNear(root, dir, f) {
				t.Errorf("%s names %s, which does not exist", rel, f)
			}
		}
		if !strings.Contains(text, "// Here: ") {
			return nil
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			base := filepath.Base(f)
			if strings.HasSuffix(base, "_test.go") || base == "doc.go" {
				continue
			}
			if !slices.Contains(named, base) {
				t.Errorf("%s lists the package's files (Here: ...) but not %s", rel, base)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// existsNear reports whether name is a file in dir, in one of dir's
// parents up to root, or under root.
func existsNear(root, dir, name string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return true
		}
		if d == root || d == "." || d == string(filepath.Separator) {
			return false
		}
	}
}
