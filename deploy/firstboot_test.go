package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// blockText is the source of the first block of type typ with labels in
// files, and its body.
func findBlock(t *testing.T, files []tfFile, typ string, labels ...string) (string, *hclsyntax.Body) {
	t.Helper()
	for _, f := range files {
		for _, b := range f.body.Blocks {
			if b.Type == typ && strings.Join(b.Labels, ".") == strings.Join(labels, ".") {
				r := b.Range()
				return string(f.src[r.Start.Byte:r.End.Byte]), b.Body
			}
		}
	}
	t.Fatalf("no %s %v block", typ, labels)
	return "", nil
}

func attrSrc(t *testing.T, files []tfFile, body *hclsyntax.Body, name string) string {
	t.Helper()
	a, ok := body.Attributes[name]
	if !ok {
		return ""
	}
	r := a.Expr.Range()
	for _, f := range files {
		if f.path == r.Filename {
			return string(f.src[r.Start.Byte:r.End.Byte])
		}
	}
	t.Fatalf("attribute %s: file %s not loaded", name, r.Filename)
	return ""
}

// TestExampleFirstBootWaitsForIAM: the example's group depends on the
// module (its role's policy, queues, hook role), which takes the group's
// name as a plain variable so there is no cycle; the hooks are the group's
// own (initial_lifecycle_hook, present before the first launch), the launch
// hook is on; the module's instance profile outputs wait for the policy;
// the provider is pinned and locked.
func TestExampleFirstBootWaitsForIAM(t *testing.T) {
	ex := loadDir(t, exampleDir)
	_, group := findBlock(t, ex, "resource", "aws_autoscaling_group", "fleet")
	if dep := attrSrc(t, ex, group, "depends_on"); !strings.Contains(dep, "module.autodiag") {
		t.Errorf("aws_autoscaling_group.fleet depends_on = %q; want module.autodiag", dep)
	}
	hooks := false
	for _, b := range group.Blocks {
		if b.Type == "dynamic" && len(b.Labels) == 1 && b.Labels[0] == "initial_lifecycle_hook" {
			hooks = true
		}
	}
	if !hooks {
		t.Error("the group has no initial_lifecycle_hook: a hook added after the group misses its first launches")
	}
	_, mod := findBlock(t, ex, "module", "autodiag")
	if a := attrSrc(t, ex, mod, "asg_name"); strings.Contains(a, "aws_autoscaling_group") {
		t.Errorf("module asg_name = %s: a reference to the group would make depends_on a cycle", a)
	}
	for k, want := range map[string]string{"create_lifecycle_hooks": "false", "launch_hook": "true"} {
		if got := attrSrc(t, ex, mod, k); got != want {
			t.Errorf("module %s = %q; want %s", k, got, want)
		}
	}

	m := loadDir(t, moduleDir)
	for _, out := range []string{"instance_profile_name", "instance_profile_arn"} {
		_, body := findBlock(t, m, "output", out)
		if dep := attrSrc(t, m, body, "depends_on"); !strings.Contains(dep, "aws_iam_role_policy.agent") {
			t.Errorf("output %s depends_on = %q; want aws_iam_role_policy.agent", out, dep)
		}
	}

	versions, err := os.ReadFile(filepath.Join(exampleDir, "versions.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`version\s*=\s*"~> \d+\.\d+\.\d+"`).Match(versions) {
		t.Errorf("%s/versions.tf: the aws provider must be pinned to a patch series (~> X.Y.Z)", exampleDir)
	}
	lock, err := os.ReadFile(filepath.Join(exampleDir, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatalf("the example's lock file must be committed: %v", err)
	}
	if !regexp.MustCompile(`provider "registry.terraform.io/hashicorp/aws" \{\s*version\s*=\s*"\d+\.\d+\.\d+"`).Match(lock) ||
		!strings.Contains(string(lock), `"h1:`) {
		t.Errorf(".terraform.lock.hcl pins no aws provider version with a hash:\n%s", lock)
	}
}
