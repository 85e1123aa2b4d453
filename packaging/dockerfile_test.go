package packaging

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	dockerfilePath = "../Dockerfile"
	goreleaserPath = "../.goreleaser.yaml"
)

// dockerInstruction is one instruction of a Dockerfile: its keyword in
// upper case and the rest of its line.
type dockerInstruction struct {
	Cmd, Args string
}

// parseDockerfile reads the instructions of a Dockerfile that has no line
// continuations (ours has none; a trailing backslash is refused rather
// than misread). Comments and blank lines are skipped.
func parseDockerfile(text string) ([]dockerInstruction, error) {
	var out []dockerInstruction
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			return nil, fmt.Errorf("line %d: a line continuation, which this reader does not follow", i+1)
		}
		cmd, args, _ := strings.Cut(line, " ")
		out = append(out, dockerInstruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)})
	}
	return out, nil
}

// checkDockerfile is the image's contract: the static binary on Debian
// slim pinned by digest, with the default catalog's programs installed by
// one RUN (procps beside the base's coreutils and libc-bin) and nothing
// else, run as the non-root user 65532, entered as /autodiag with `run` as
// the default command, a HEALTHCHECK through the binary and SIGTERM to
// stop. It returns every breach.
func checkDockerfile(text string) []string {
	ins, err := parseDockerfile(text)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	by := map[string][]string{}
	for _, in := range ins {
		by[in.Cmd] = append(by[in.Cmd], in.Args)
	}
	for cmd := range by {
		switch cmd {
		case "FROM", "ARG", "COPY", "USER", "ENTRYPOINT", "CMD", "LABEL", "RUN", "HEALTHCHECK", "STOPSIGNAL":
		default:
			bad = append(bad, fmt.Sprintf("unexpected %s instruction %q", cmd, by[cmd]))
		}
	}
	from := by["FROM"]
	if len(from) != 1 {
		bad = append(bad, fmt.Sprintf("FROM %q: want one stage", from))
	} else if !pinnedSlim.MatchString(from[0]) {
		bad = append(bad, fmt.Sprintf("FROM %q: want debian:<release>-slim pinned by @sha256 digest", from[0]))
	}
	if r := by["RUN"]; len(r) != 1 {
		bad = append(bad, fmt.Sprintf("RUN %q: want one, installing the catalog's programs", r))
	} else {
		for _, want := range []string{"apt-get install -y --no-install-recommends procps", "rm -rf /var/lib/apt/lists/*", "--uid 65532"} {
			if !strings.Contains(r[0], want) {
				bad = append(bad, fmt.Sprintf("RUN %q: want %q", r[0], want))
			}
		}
	}
	if u := by["USER"]; len(u) != 1 || (u[0] != "65532" && u[0] != "65532:65532") {
		bad = append(bad, fmt.Sprintf("USER %q: want 65532, set explicitly", u))
	}
	if c := by["COPY"]; len(c) != 1 {
		bad = append(bad, fmt.Sprintf("COPY %q: want the binary alone", c))
	} else if f := strings.Fields(c[0]); len(f) != 2 || f[1] != "/autodiag" || !strings.HasSuffix(f[0], "/autodiag") {
		bad = append(bad, fmt.Sprintf("COPY %q: want the platform's autodiag binary to /autodiag", c[0]))
	}
	if h := by["HEALTHCHECK"]; len(h) != 1 || !strings.Contains(h[0], `CMD ["/autodiag", "healthcheck"]`) {
		bad = append(bad, fmt.Sprintf("HEALTHCHECK %q: want CMD [\"/autodiag\", \"healthcheck\"]", h))
	}
	if s := by["STOPSIGNAL"]; len(s) != 1 || s[0] != "SIGTERM" {
		bad = append(bad, fmt.Sprintf("STOPSIGNAL %q: want SIGTERM (it drains)", s))
	}
	exec := func(cmd string, want []string) {
		v := by[cmd]
		var got []string
		if len(v) != 1 || json.Unmarshal([]byte(v[0]), &got) != nil || !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%s %q: want the exec form %q", cmd, v, want))
		}
	}
	exec("ENTRYPOINT", []string{"/autodiag"})
	exec("CMD", []string{"run"})
	return bad
}

var pinnedSlim = regexp.MustCompile(`^debian:[a-z]+-slim@sha256:[0-9a-f]{64}$`)

// TestDockerfileContract pins the image: the catalog's programs, non-root,
// a pinned base, a health check.
func TestDockerfileContract(t *testing.T) {
	if bad := checkDockerfile(readFile(t, dockerfilePath)); len(bad) > 0 {
		t.Fatalf("%s breaks the image contract:\n%s", dockerfilePath, strings.Join(bad, "\n"))
	}
}

// TestDockerfileContractCatches: each breach of the contract is caught,
// so TestDockerfileContract can fail.
func TestDockerfileContractCatches(t *testing.T) {
	good := readFile(t, dockerfilePath)
	from := regexp.MustCompile(`(?m)^FROM .*$`).FindString(good)
	run := regexp.MustCompile(`(?m)^RUN .*$`).FindString(good)
	for _, tc := range []struct{ name, old, new string }{
		{"a tag, not a digest", from, "FROM debian:bookworm-slim"},
		{"distroless again", from, "FROM gcr.io/distroless/static-debian12:nonroot"},
		{"root user", "USER 65532:65532", "USER root"},
		{"no user", "USER 65532:65532\n", ""},
		{"no procps", run, strings.Replace(run, " procps", " curl", 1)},
		{"a second run", run, run + "\nRUN chmod 755 /autodiag"},
		{"more copied", "COPY $TARGETPLATFORM/autodiag /autodiag", "COPY . /"},
		{"no health check", `HEALTHCHECK --interval=30s`, `LABEL x=y`},
		{"another stop signal", "STOPSIGNAL SIGTERM", "STOPSIGNAL SIGKILL"},
		{"shell entrypoint", `ENTRYPOINT ["/autodiag"]`, "ENTRYPOINT /autodiag"},
		{"another command", `CMD ["run"]`, `CMD ["intake"]`},
		{"a continuation", `CMD ["run"]`, "CMD \\\n  [\"run\"]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.old == "" || !strings.Contains(good, tc.old) {
				t.Fatalf("%s no longer holds %q: update this case", dockerfilePath, tc.old)
			}
			if bad := checkDockerfile(strings.Replace(good, tc.old, tc.new, 1)); len(bad) == 0 {
				t.Fatalf("replacing %q by %q breaks nothing the check sees", tc.old, tc.new)
			}
		})
	}
}

// TestGoreleaserBuildsTheImage: the release builds the image from this
// Dockerfile for both platforms the binaries are built for.
func TestGoreleaserBuildsTheImage(t *testing.T) {
	var gr struct {
		DockersV2 []struct {
			Dockerfile string   `yaml:"dockerfile"`
			Platforms  []string `yaml:"platforms"`
		} `yaml:"dockers_v2"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, goreleaserPath)), &gr); err != nil {
		t.Fatal(err)
	}
	if len(gr.DockersV2) != 1 {
		t.Fatalf("dockers_v2 has %d entries; want the one image", len(gr.DockersV2))
	}
	d := gr.DockersV2[0]
	if d.Dockerfile != "Dockerfile" {
		t.Errorf("dockers_v2 dockerfile = %q; want Dockerfile (the one %s pins)", d.Dockerfile, dockerfilePath)
	}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		if !slices.Contains(d.Platforms, p) {
			t.Errorf("dockers_v2 platforms %q lack %s", d.Platforms, p)
		}
	}
}

// TestGoreleaserSignsAndAttests: checksums.txt is signed through
// packaging/release/sign.sh, every archive and package gets an SBOM
// through packaging/release/sbom.sh, and every tarball entry carries the
// commit's time and a fixed owner (reproducible archives).
func TestGoreleaserSignsAndAttests(t *testing.T) {
	type info struct {
		MTime string `yaml:"mtime"`
		Owner string `yaml:"owner"`
	}
	var gr struct {
		Signs []struct {
			Artifacts string   `yaml:"artifacts"`
			Signature string   `yaml:"signature"`
			Args      []string `yaml:"args"`
		} `yaml:"signs"`
		SBOMs []struct {
			Artifacts string   `yaml:"artifacts"`
			Documents []string `yaml:"documents"`
			Args      []string `yaml:"args"`
		} `yaml:"sboms"`
		Archives []struct {
			BuildsInfo info `yaml:"builds_info"`
			Files      []struct {
				Src  string `yaml:"src"`
				Info info   `yaml:"info"`
			} `yaml:"files"`
		} `yaml:"archives"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, goreleaserPath)), &gr); err != nil {
		t.Fatal(err)
	}
	if len(gr.Signs) != 1 || gr.Signs[0].Artifacts != "checksum" || gr.Signs[0].Signature != "${artifact}.asc" ||
		!slices.Contains(gr.Signs[0].Args, "packaging/release/sign.sh") || !slices.Contains(gr.Signs[0].Args, "{{ .IsSnapshot }}") {
		t.Errorf("signs = %+v; want checksums.txt signed into checksums.txt.asc by packaging/release/sign.sh", gr.Signs)
	}
	kinds := map[string]bool{}
	for _, s := range gr.SBOMs {
		kinds[s.Artifacts] = slices.Contains(s.Args, "../../packaging/release/sbom.sh") &&
			slices.Equal(s.Documents, []string{"{{ .ArtifactName }}.cdx.json"})
	}
	if !kinds["archive"] || !kinds["package"] {
		t.Errorf("sboms = %+v; want an <artifact>.cdx.json by packaging/release/sbom.sh for archives and packages", gr.SBOMs)
	}
	const commitTime = "{{ .CommitDate }}"
	for _, a := range gr.Archives {
		if a.BuildsInfo.MTime != commitTime || a.BuildsInfo.Owner != "root" {
			t.Errorf("archives builds_info = %+v; want mtime %s, owner root", a.BuildsInfo, commitTime)
		}
		for _, f := range a.Files {
			if f.Src == "" || f.Info.MTime != commitTime || f.Info.Owner != "root" {
				t.Errorf("archive file %+v: want src with info mtime %s, owner root", f, commitTime)
			}
		}
	}
	for _, script := range []string{"../packaging/release/sign.sh", "../packaging/release/sbom.sh"} {
		if out, err := exec.CommandContext(t.Context(), "sh", "-n", script).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", script, err, out)
		}
	}
}

// TestSignScriptSnapshotVerifies runs packaging/release/sign.sh as a
// snapshot does (no key supplied): the signature verifies with the public
// key it leaves, and a release without a key fails.
func TestSignScriptSnapshotVerifies(t *testing.T) {
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("no gpg")
	}
	dir := t.TempDir()
	sum := filepath.Join(dir, "checksums.txt")
	if err := os.WriteFile(sum, []byte("0123  autodiag.tar.gz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sign := func(snapshot string) error {
		cmd := exec.CommandContext(t.Context(), "sh", "../packaging/release/sign.sh", sum+".asc", sum, snapshot)
		cmd.Env = append(os.Environ(), "GPG_FINGERPRINT=", "TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := sign("false"); err == nil {
		t.Fatal("a release without GPG_FINGERPRINT was signed")
	}
	if err := sign("true"); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	t.Cleanup(func() {
		_ = exec.CommandContext(context.Background(), "gpgconf", "--homedir", home, "--kill", "all").Run()
	})
	gpg := func(args ...string) error {
		cmd := exec.CommandContext(t.Context(), "gpg", append([]string{"--batch", "--homedir", home}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("gpg %v: %w: %s", args, err, out)
		}
		return nil
	}
	if err := gpg("--import", filepath.Join(dir, "snapshot-signing-key.asc")); err != nil {
		t.Fatal(err)
	}
	if err := gpg("--verify", sum+".asc", sum); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sum, []byte("9999  autodiag.tar.gz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := gpg("--verify", sum+".asc", sum); err == nil {
		t.Fatal("the signature verifies a changed checksums.txt")
	}
}
