package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeContainerConfigValidates: the container example in docs/install.md
// (between the container-config markers) passes `autodiag config validate`,
// and listens beyond loopback only with admin_auth.
func TestReadmeContainerConfigValidates(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- container-config -->")
	block, _, ok2 := strings.Cut(rest, "<!-- /container-config -->")
	if !ok || !ok2 {
		t.Fatal("docs/install.md has no container-config block")
	}
	yaml := strings.TrimSpace(block)
	yaml = strings.TrimPrefix(yaml, "```yaml")
	yaml = strings.TrimSuffix(yaml, "```")
	if !strings.Contains(yaml, "admin_auth") || !strings.Contains(yaml, "0.0.0.0") {
		t.Fatalf("the container example should listen beyond loopback with admin_auth:\n%s", yaml)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AUTODIAG_CONFIG", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "validate", "--config", path}, &stdout, &stderr); code != exitOK {
		t.Fatalf("config validate of the container example of docs/install.md: exit %d\n%s%s\n%s", code, stdout.String(), stderr.String(), yaml)
	}
}
