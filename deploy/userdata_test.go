package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v3"
)

// The example's user data installs the agent from the bare release binary
// or from a release package. Both run the one unit,
// deploy/systemd/autodiag.service: the package ships it with a drop-in
// moving ExecStart to its binary, user data installs it as is next to a
// binary put where its ExecStart looks.

const goreleaserPath = "../.goreleaser.yaml"

// renderUserData renders the template as Terraform's templatefile does
// (the same HCL template language) with vars.
func renderUserData(t *testing.T, vars map[string]string) string {
	t.Helper()
	src, err := os.ReadFile(userDataPath)
	if err != nil {
		t.Fatal(err)
	}
	expr, diags := hclsyntax.ParseTemplate(src, userDataPath, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", userDataPath, diags)
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{}}
	for k, v := range vars {
		ctx.Variables[k] = cty.StringVal(v)
	}
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		t.Fatalf("render %s: %v", userDataPath, diags)
	}
	return v.AsString()
}

// installPaths are the binary and unit paths main.tf hands the template
// for one install kind, read from the `install` local's literal object
// (package: the conditional's true branch).
func installPaths(t *testing.T, kind string) (binary, unit string) {
	t.Helper()
	for _, f := range loadDir(t, exampleDir) {
		for _, b := range f.body.Blocks {
			if b.Type != "locals" {
				continue
			}
			a, ok := b.Body.Attributes["install"]
			if !ok {
				continue
			}
			cond, ok := a.Expr.(*hclsyntax.ConditionalExpr)
			if !ok {
				t.Fatalf("%s: local.install is not a conditional", f.path)
			}
			obj := cond.FalseResult
			if kind == "package" {
				obj = cond.TrueResult
			}
			cons, ok := obj.(*hclsyntax.ObjectConsExpr)
			if !ok {
				t.Fatalf("%s: local.install's %s branch is not an object", f.path, kind)
			}
			for _, item := range cons.Items {
				key, _ := staticString(item.KeyExpr)
				if key == "" {
					key = f.text(item.KeyExpr.Range())
				}
				val, _ := staticString(item.ValueExpr)
				switch key {
				case "binary_path":
					binary = val
				case "unit_path":
					unit = val
				}
			}
			return binary, unit
		}
	}
	t.Fatalf("%s: no local.install", exampleDir)
	return "", ""
}

// unitExecStart is the program of the shipped unit's ExecStart.
func unitExecStart(t *testing.T, path string) string {
	t.Helper()
	v, ok := readUnit(t, path).last("Service", "ExecStart")
	if !ok || v == "" {
		t.Fatalf("%s: no ExecStart", path)
	}
	return strings.Fields(v)[0]
}

// nfpmLayout is what the release packages install: the binary's path and
// where each source file goes.
func nfpmLayout(t *testing.T) (binary string, dst map[string]string) {
	t.Helper()
	b, err := os.ReadFile(goreleaserPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Builds []struct {
			Binary string `yaml:"binary"`
		} `yaml:"builds"`
		NFPMs []struct {
			Bindir   string `yaml:"bindir"`
			Contents []struct {
				Src string `yaml:"src"`
				Dst string `yaml:"dst"`
			} `yaml:"contents"`
		} `yaml:"nfpms"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", goreleaserPath, err)
	}
	if len(cfg.Builds) != 1 || len(cfg.NFPMs) != 1 {
		t.Fatalf("%s: want one build and one nfpm package, have %d and %d", goreleaserPath, len(cfg.Builds), len(cfg.NFPMs))
	}
	dst = map[string]string{}
	for _, c := range cfg.NFPMs[0].Contents {
		if c.Src != "" {
			dst[c.Src] = c.Dst
		}
	}
	return filepath.Join(cfg.NFPMs[0].Bindir, cfg.Builds[0].Binary), dst
}

// TestUserDataPackagePathsAreThePackages: what user data runs after a
// package install (the binary, the unit it validates) is what the release
// packages put there, and the packaged drop-in starts that binary.
func TestUserDataPackagePathsAreThePackages(t *testing.T) {
	binary, unit := installPaths(t, "package")
	pkgBinary, dst := nfpmLayout(t)
	if binary != pkgBinary {
		t.Errorf("user data runs %q after a package install; the package installs %q", binary, pkgBinary)
	}
	if got := dst["deploy/"+unitPath]; got != unit {
		t.Errorf("user data validates the unit %q; the package installs deploy/%s as %q", unit, unitPath, got)
	}
	dropIn := dst["packaging/systemd/packaged.conf"]
	if dropIn != unit+".d/packaged.conf" {
		t.Errorf("the package's drop-in goes to %q, want %s.d/packaged.conf beside the unit", dropIn, unit)
	}
	drop := readUnit(t, filepath.Join("..", "packaging", "systemd", "packaged.conf"))["Service"]["ExecStart"]
	if len(drop) != 2 || drop[0] != "" || strings.Fields(drop[1])[0] != pkgBinary {
		t.Errorf("packaged.conf ExecStart lines %q: want a reset, then %s", drop, pkgBinary)
	}
	bin, unitDst := installPaths(t, "binary")
	if bin != "" {
		t.Errorf("the binary install's path is the literal %q; it must come from the unit's ExecStart", bin)
	}
	if unitDst != "/etc/systemd/system/autodiag.service" {
		t.Errorf("the binary install writes the unit to %q, want /etc/systemd/system/autodiag.service", unitDst)
	}
}

// TestUserDataInstalls renders user data for each install kind and checks
// that bash parses it, that every download is bounded and verified, and
// that exactly one unit runs: the shipped one.
func TestUserDataInstalls(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	unitSrc, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	shippedBinary := unitExecStart(t, unitPath)
	pkgBinary, pkgUnit := installPaths(t, "package")
	const sha = "1111111111111111111111111111111111111111111111111111111111111111"
	base := map[string]string{
		"region": "eu-west-1", "asg_name": "fleet", "download_sha256": sha,
		"config_yaml": "workers: 4", "systemd_unit": string(unitSrc),
	}
	tests := []struct {
		name, kind, format, url, binary, unit string
		want, wantNot                         []string
	}{
		{"binary", "binary", "", "https://example.com/autodiag", shippedBinary, "/etc/systemd/system/autodiag.service",
			[]string{
				"-o /tmp/autodiag 'https://example.com/autodiag'",
				"echo '" + sha + "  /tmp/autodiag' | sha256sum --check --strict -",
				"install -m 0755 -o root -g root /tmp/autodiag " + shippedBinary + "\n",
				"useradd --system",
				"cat > /etc/systemd/system/autodiag.service <<'AUTODIAG_UNIT'\n" + string(unitSrc),
				shippedBinary + " config validate --config /etc/autodiag/config.yaml \\\n  --systemd-unit /etc/systemd/system/autodiag.service\n",
			},
			[]string{"apt-get", "rpm ", "--systemd-unit /lib/systemd"}},
		{"deb", "package", "deb", "https://example.com/autodiag_1.0.0_amd64.deb", pkgBinary, pkgUnit,
			[]string{
				"echo '" + sha + "  /tmp/autodiag.deb' | sha256sum --check --strict -",
				"apt-get install -y -o DPkg::Lock::Timeout=300 /tmp/autodiag.deb\n",
				pkgBinary + " config validate --config /etc/autodiag/config.yaml \\\n  --systemd-unit " + pkgUnit + "\n",
			},
			[]string{"AUTODIAG_UNIT", "useradd", "rpm ", shippedBinary}},
		{"rpm", "package", "rpm", "https://example.com/autodiag-1.0.0-1.x86_64.rpm", pkgBinary, pkgUnit,
			[]string{
				"echo '" + sha + "  /tmp/autodiag.rpm' | sha256sum --check --strict -",
				"rpm --upgrade --replacepkgs /tmp/autodiag.rpm\n",
				pkgBinary + " config validate --config /etc/autodiag/config.yaml \\\n  --systemd-unit " + pkgUnit + "\n",
			},
			[]string{"AUTODIAG_UNIT", "useradd", "apt-get", shippedBinary}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"install_from": tt.kind, "package_format": tt.format, "download_url": tt.url,
				"binary_path": tt.binary, "unit_path": tt.unit}
			for k, v := range base {
				vars[k] = v
			}
			out := renderUserData(t, vars)
			cmd := exec.CommandContext(t.Context(), bash, "-n")
			cmd.Stdin = strings.NewReader(out)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("bash -n: %v: %s\n%s", err, stderr.String(), out)
			}
			for _, err := range checkUserData(out) {
				t.Error(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("rendered user data lacks %q", w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("rendered user data has %q", w)
				}
			}
			if n := strings.Count(out, "systemctl enable --now autodiag.service"); n != 1 {
				t.Errorf("systemctl enable --now autodiag.service %d times, want once", n)
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("rendered:\n%s", out)
			}
		})
	}
}
