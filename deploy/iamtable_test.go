package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeIAMTableMatchesTheModule: the docs/operations.md table of the
// instance role ("The instance role allows exactly the calls the agent
// makes") names exactly the actions the module's agent policy grants, and
// each row names the module input (or resource) that scopes it.
func TestReadmeIAMTableMatchesTheModule(t *testing.T) {
	src, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const intro = "The instance role allows exactly the calls the agent makes:"
	_, rest, ok := strings.Cut(string(src), intro)
	if !ok {
		t.Fatalf("docs/operations.md has no %q", intro)
	}
	action := regexp.MustCompile("`([a-z0-9]+:[A-Za-z]+)`")
	input := regexp.MustCompile("`([a-z_]+)`")
	inReadme := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(rest, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "Action" {
			continue
		}
		rows++
		for _, m := range action.FindAllStringSubmatch(cells[1], -1) {
			inReadme[m[1]] = true
		}
		// A row scoped by a module input names it, and the module has it.
		for _, m := range input.FindAllStringSubmatch(cells[2], -1) {
			if strings.HasSuffix(m[1], "_arn") || strings.HasSuffix(m[1], "_arns") || strings.HasPrefix(m[1], "results_") {
				if !moduleHasVariable(t, m[1]) {
					t.Errorf("README IAM row %q names %s, which is no input of the module", strings.TrimSpace(line), m[1])
				}
			}
		}
	}
	inModule := map[string]bool{}
	for _, g := range grants(t, policyStatements(loadDir(t, moduleDir)), "agent", "agent_lifecycle_queue") {
		a, _, _ := strings.Cut(g, " on ")
		inModule[a] = true
	}
	var missing, extra []string
	for a := range inModule {
		if !inReadme[a] {
			missing = append(missing, a)
		}
	}
	for a := range inReadme {
		if !inModule[a] {
			extra = append(extra, a)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("README IAM table lacks actions the module grants: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("README IAM table lists actions the module does not grant: %v", extra)
	}
}

func moduleHasVariable(t *testing.T, name string) bool {
	t.Helper()
	for _, f := range loadDir(t, moduleDir) {
		for _, b := range f.body.Blocks {
			if b.Type == "variable" && len(b.Labels) == 1 && b.Labels[0] == name {
				return true
			}
		}
	}
	return false
}
