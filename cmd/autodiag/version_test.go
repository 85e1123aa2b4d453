package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/harness"
)

// releaseBuild is the part of .goreleaser.yaml's build that stamps the
// version.
type releaseBuild struct {
	Main    string   `yaml:"main"`
	Env     []string `yaml:"env"`
	Flags   []string `yaml:"flags"`
	Ldflags []string `yaml:"ldflags"`
}

// TestReleaseBuildStampsVersion builds the binary the way the release does,
// with .goreleaser.yaml's own flags and ldflags (template values filled in),
// and checks that --version and `version --json` report what was stamped:
// a renamed variable or a typo in -X would leave "dev" in every release.
func TestReleaseBuildStampsVersion(t *testing.T) {
	raw, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Builds []releaseBuild `yaml:"builds"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if len(cfg.Builds) != 1 || cfg.Builds[0].Main != "./cmd/autodiag" {
		t.Fatalf(".goreleaser.yaml: want one build of ./cmd/autodiag, got %+v", cfg.Builds)
	}
	b := cfg.Builds[0]
	want := buildInfo{
		Version:  "1.4.2-rc.1",
		Commit:   "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
		Date:     "2026-03-04T05:06:07Z",
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	ldflags := strings.NewReplacer(
		"{{.Version}}", want.Version,
		"{{.FullCommit}}", want.Commit,
		"{{.CommitDate}}", want.Date,
	).Replace(strings.Join(b.Ldflags, " "))
	if strings.Contains(ldflags, "{{") {
		t.Fatalf("ldflags use a template value this test does not fill in: %s", ldflags)
	}

	bin := filepath.Join(t.TempDir(), "autodiag")
	args := append([]string{"build"}, b.Flags...)
	args = append(args, "-ldflags", ldflags, "-o", bin, ".")
	build := exec.CommandContext(t.Context(), "go", args...)
	build.Env = append(os.Environ(), b.Env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	out := runVersion(t, bin, "--version")
	if out != want.String()+"\n" {
		t.Errorf("--version = %q, want %q", out, want.String()+"\n")
	}
	if strings.Contains(out, "dev") || strings.Contains(out, "unknown") {
		t.Errorf("--version of a release build = %q, mentions dev or unknown", out)
	}
	if got := runVersion(t, bin, "version"); got != out {
		t.Errorf("version = %q, --version = %q: want the same", got, out)
	}
	var got buildInfo
	dec := json.NewDecoder(strings.NewReader(runVersion(t, bin, "version", "--json")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("version --json: %v", err)
	}
	if got != want {
		t.Errorf("version --json = %+v, want %+v", got, want)
	}
}

// TestHarnessBuildIsReleaseBuild: the binary the end-to-end tests run
// (harness.Build) is compiled with .goreleaser.yaml's env and flags and
// linked with its ldflags less the version stamp. The tests then run what
// the release ships, and a fresh machine compiles the agent once for both
// (the Go build cache keys a compile on these settings): a release setting
// changed without harness.Build would compile everything twice again.
func TestHarnessBuildIsReleaseBuild(t *testing.T) {
	raw, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Builds []releaseBuild `yaml:"builds"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if len(cfg.Builds) != 1 {
		t.Fatalf(".goreleaser.yaml: want one build, got %d", len(cfg.Builds))
	}
	b := cfg.Builds[0]
	if !slices.Equal(b.Env, harness.ReleaseEnv) {
		t.Errorf("harness.ReleaseEnv = %q, .goreleaser.yaml's env = %q", harness.ReleaseEnv, b.Env)
	}
	if !slices.Equal(b.Flags, harness.ReleaseFlags) {
		t.Errorf("harness.ReleaseFlags = %q, .goreleaser.yaml's flags = %q", harness.ReleaseFlags, b.Flags)
	}
	var unstamped []string
	for _, l := range b.Ldflags {
		f := strings.Fields(l)
		for i := 0; i < len(f); i++ {
			if f[i] == "-X" {
				i++ // and its name=value
				continue
			}
			unstamped = append(unstamped, f[i])
		}
	}
	if got := strings.Join(unstamped, " "); got != harness.ReleaseLdflags {
		t.Errorf("harness.ReleaseLdflags = %q, .goreleaser.yaml's ldflags less -X = %q", harness.ReleaseLdflags, got)
	}
	// scripts/test.sh compiles this agent beside vet, for the tests to
	// find in the build cache: with other settings it compiles for nothing.
	script, err := os.ReadFile("../../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(harness.ReleaseEnv, " ") + " go build " + strings.Join(harness.ReleaseFlags, " ") +
		" -ldflags='" + harness.ReleaseLdflags + "' "
	if !strings.Contains(string(script), line) {
		t.Errorf("scripts/test.sh does not build the e2e agent with harness.Build's settings: no %q", line)
	}
}

func runVersion(t *testing.T, bin string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("autodiag %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestVersionCommandArgs: the version command takes no arguments, and says
// so with the usage exit code like every other command.
func TestVersionCommandArgs(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version", "extra"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("version extra: exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
	}
}

// TestIsReleaseVersion: only a tagged release's module version replaces
// "dev"; a checkout's pseudo-version or a modified tree stays a development
// build.
func TestIsReleaseVersion(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"", false},
		{"(devel)", false},
		{"v1.2.3", true},
		{"v1.3.0-rc.1", true},
		{"v0.0.0-20261130141006-b57cfd7d8a06", false},
		{"v1.2.4-0.20261130141006-b57cfd7d8a06", false},
		{"v1.3.0-rc.1.0.20261130141006-b57cfd7d8a06", false},
		{"v1.2.3+dirty", false},
		{"v0.0.0-20261130141006-b57cfd7d8a06+dirty", false},
	} {
		if got := isReleaseVersion(tc.v); got != tc.want {
			t.Errorf("isReleaseVersion(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}
