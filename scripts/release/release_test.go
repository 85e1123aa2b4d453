package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

const goreleaserYAML = "../../.goreleaser.yaml"

// TestGoreleaserConfigDecodes: the project's .goreleaser.yaml is what this
// program builds from; every key of the sections it carries out is known
// to it (strict decoding), and what release-check relies on is there.
func TestGoreleaserConfigDecodes(t *testing.T) {
	c, err := loadConfig(goreleaserYAML)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Builds[0]
	if b.Main != "./cmd/autodiag" || !contains(b.Flags, "-trimpath") || len(b.Ldflags) != 1 || !strings.HasPrefix(b.Ldflags[0], "-s -w ") {
		t.Errorf("builds[0] = %+v; want ./cmd/autodiag, -trimpath, ldflags -s -w …", b)
	}
	if n := c.NFPMs[0]; !contains(n.Formats, "deb") || !contains(n.Formats, "rpm") || n.Bindir != "/usr/bin" {
		t.Errorf("nfpms[0] formats %v bindir %q; want deb and rpm into /usr/bin", n.Formats, n.Bindir)
	}
	var files []string
	for _, f := range c.Archives[0].Files {
		files = append(files, f.Src)
	}
	for _, want := range []string{"README.md", "LICENSE", "deploy/systemd/autodiag.service", "deploy/config/example.yaml"} {
		if !contains(files, want) {
			t.Errorf("archives[0].files %v lack %s", files, want)
		}
	}
}

// TestUnknownKeyFails: a key added to .goreleaser.yaml that this program
// does not carry out stops the snapshot, naming the key and its line,
// instead of a snapshot that silently differs from the release.
func TestUnknownKeyFails(t *testing.T) {
	raw, err := os.ReadFile(goreleaserYAML)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ after, insert, want string }{
		{"    package_name: autodiag\n", "    epoch: \"2\"\n", "epoch"},
		{"project_name: autodiag\n", "universal_binaries: []\n", "universal_binaries"},
		{"    flags: [-trimpath, -gcflags=all=-dwarf=false]\n", "    tags: [netgo]\n", "tags"},
	} {
		if !strings.Contains(string(raw), tc.after) {
			t.Fatalf(".goreleaser.yaml has no line %q to insert after", tc.after)
		}
		mutated := strings.Replace(string(raw), tc.after, tc.after+tc.insert, 1)
		path := filepath.Join(t.TempDir(), ".goreleaser.yaml")
		if err := os.WriteFile(path, []byte(mutated), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadConfig(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "line ") {
			t.Errorf("with %q added: err = %v; want one naming %s and its line", tc.insert, err, tc.want)
		}
	}
}

func TestExpandUnknownVariable(t *testing.T) {
	v := vars{Version: "1.2.3", Os: "linux"}
	if got, err := expand("{{ .Version }}_{{ .Os }}", v); err != nil || got != "1.2.3_linux" {
		t.Errorf("expand = %q, %v", got, err)
	}
	if _, err := expand("{{ .Summary }}", v); err == nil {
		t.Error("an unknown template variable expanded without an error")
	}
}

// TestSelectGoarch: -goarch keeps the build's order and only its
// architectures; empty means all of them; an unknown or empty name is an
// error naming it.
func TestSelectGoarch(t *testing.T) {
	build := []string{"amd64", "arm64"}
	for _, tc := range []struct {
		list string
		want []string
	}{
		{"", []string{"amd64", "arm64"}},
		{"amd64", []string{"amd64"}},
		{"arm64", []string{"arm64"}},
		{"arm64,amd64", []string{"amd64", "arm64"}},
		{" arm64 , arm64", []string{"arm64"}},
	} {
		got, err := selectGoarch(build, tc.list)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("selectGoarch(%q) = %q, %v; want %q", tc.list, got, err, tc.want)
		}
	}
	for _, list := range []string{"riscv64", "amd64,", "amd64,386"} {
		got, err := selectGoarch(build, list)
		if err == nil {
			t.Errorf("selectGoarch(%q) = %q, want an error", list, got)
			continue
		}
		if !strings.Contains(err.Error(), "builds.goarch") {
			t.Errorf("selectGoarch(%q): %v; want the error to name builds.goarch", list, err)
		}
	}
}

// TestTarballReproducible: two tarballs of the same files, whose mtimes on
// disk differ, are byte-identical, and their entries carry the configured
// mtime, owner and mode.
func TestTarballReproducible(t *testing.T) {
	a := archiveConfig{
		NameTemplate: "x_{{ .Version }}_{{ .Os }}_{{ .Arch }}",
		BuildsInfo:   fileInfo{MTime: "{{ .CommitDate }}", Owner: "root", Group: "root", Mode: 0o755},
	}
	v := vars{Version: "1.0.0", CommitDate: "2026-01-02T03:04:05Z"}
	var out [][]byte
	for i := range 2 {
		dir := t.TempDir()
		bin := filepath.Join(dir, "autodiag")
		if err := os.WriteFile(bin, []byte("binary"), 0o700); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(time.Duration(i) * time.Hour)
		if err := os.Chtimes(bin, when, when); err != nil {
			t.Fatal(err)
		}
		path, err := writeTarball(a, built{"linux", "amd64", bin}, v, dir)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) != "x_1.0.0_linux_amd64.tar.gz" {
			t.Errorf("tarball named %s", filepath.Base(path))
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Fatal("two tarballs of the same content differ")
	}
	gz, err := gzip.NewReader(bytes.NewReader(out[0]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "autodiag" || h.Uname != "root" || h.Mode != 0o755 || !h.ModTime.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("entry %+v; want autodiag, root, 0755, the commit's time", h)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("more than one entry: %v", err)
	}
}

// TestSBOMFromBuildInfo: the SBOM lists the modules of a binary's build
// info (this test binary's), names the release's version, and is stable.
func TestSBOMFromBuildInfo(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info in the test binary")
	}
	doc := buildSBOM(bi, "x.tar.gz", "1.2.3-SNAPSHOT-abc", "2026-01-02T03:04:05Z")
	if doc.BOMFormat != "CycloneDX" || doc.Metadata.Component.Version != "1.2.3-SNAPSHOT-abc" {
		t.Errorf("metadata %+v", doc.Metadata.Component)
	}
	var names []string
	for _, c := range doc.Components {
		names = append(names, c.Name)
	}
	if !contains(names, "github.com/goreleaser/nfpm/v2") {
		t.Errorf("components %v lack github.com/goreleaser/nfpm/v2", names)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] > names[i] {
			t.Fatalf("components not sorted: %s before %s", names[i-1], names[i])
		}
	}
	if len(doc.Dependencies) != 1 || len(doc.Dependencies[0].DependsOn) != len(doc.Components) {
		t.Errorf("dependencies %+v; want the main component depending on all %d", doc.Dependencies, len(doc.Components))
	}
}

// TestTarballGlobs: an archive file's src is a glob whose matches go in
// sorted order under their own paths, and a glob that matches nothing
// stops the build.
func TestTarballGlobs(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, f := range []string{"autodiag", "docs/b.md", "docs/a.md", "docs/x.yaml"} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	info := fileInfo{MTime: "{{ .CommitDate }}", Owner: "root", Group: "root", Mode: 0o644}
	a := archiveConfig{NameTemplate: "x_{{ .Os }}_{{ .Arch }}", BuildsInfo: info}
	a.Files = append(a.Files, struct {
		Src  string   `yaml:"src"`
		Info fileInfo `yaml:"info"`
	}{"docs/*.md", info})
	v := vars{Version: "1.0.0", CommitDate: "2026-01-02T03:04:05Z"}
	path, err := writeTarball(a, built{"linux", "amd64", "autodiag"}, v, ".")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tr := tar.NewReader(gz); ; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "autodiag docs/a.md docs/b.md" {
		t.Errorf("entries %v; want autodiag docs/a.md docs/b.md", names)
	}
	a.Files[0].Src = "doc/*.md"
	if _, err := writeTarball(a, built{"linux", "amd64", "autodiag"}, v, "."); err == nil || !strings.Contains(err.Error(), "doc/*.md") {
		t.Errorf("a glob matching nothing: err = %v; want one naming it", err)
	}
}

// TestDocsShipped: every relative link of README.md, and every link of
// docs/*.md that stays inside docs/, names a file the tarball holds at
// that path and the packages hold at that path under the README's
// directory, so the links work in an unpacked release and in
// /usr/share/doc/autodiag.
func TestDocsShipped(t *testing.T) {
	c, err := loadConfig(goreleaserYAML)
	if err != nil {
		t.Fatal(err)
	}
	const root = "../.."
	glob := func(src string) []string {
		m, err := filepath.Glob(filepath.Join(root, src))
		if err != nil || len(m) == 0 {
			t.Fatalf("%q matches nothing (%v)", src, err)
		}
		for i := range m {
			m[i], _ = filepath.Rel(root, m[i])
		}
		return m
	}
	tarball := map[string]bool{}
	for _, f := range c.Archives[0].Files {
		for _, m := range glob(f.Src) {
			tarball[filepath.ToSlash(m)] = true
		}
	}
	const docDir = "/usr/share/doc/autodiag/"
	pkg := map[string]bool{}
	for _, ct := range c.NFPMs[0].Contents {
		if ct.Src == "" || !strings.HasPrefix(ct.Dst, docDir) {
			continue
		}
		for _, m := range glob(ct.Src) {
			dst := ct.Dst
			if strings.HasSuffix(dst, "/") {
				dst += filepath.Base(m)
			}
			pkg[strings.TrimPrefix(dst, docDir)] = true
		}
	}
	link := regexp.MustCompile(`\]\(([^)#:\s]+)(?:#[^)]*)?\)`)
	var links []string
	for _, doc := range append([]string{"README.md"}, glob("docs/*.md")...) {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			p := filepath.ToSlash(filepath.Join(filepath.Dir(doc), m[1]))
			if doc == "README.md" || strings.HasPrefix(p, "docs/") {
				links = append(links, p)
			}
		}
	}
	if len(links) < 20 {
		t.Fatalf("%d links found; the pattern misses README's links to docs/", len(links))
	}
	for _, p := range links {
		if !tarball[p] {
			t.Errorf("%s is linked but not in the tarball", p)
		}
		if !pkg[p] {
			t.Errorf("%s is linked but not in the packages under %s", p, docDir)
		}
	}
}

// The snapshot's name must not depend on the checkout: git's own --short
// grows with the repository's object count.
func TestShortCommitFixedLength(t *testing.T) {
	full := "5671a5bdbf7695d787f3328655c74743b637523c"
	if got := shortCommit(full); got != "5671a5bd" {
		t.Fatalf("shortCommit(%s) = %q, want the first %d digits", full, got, shortCommitLen)
	}
}
