package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config validate accepts a parameter with charset: any and warns, naming
// it; a charset that names no parameter is an error with its line.
func TestConfigValidateWarnsCharsetAny(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	body := "diagnostics:\n  - name: grep-log\n    command: [/usr/bin/grep, -F, --, '{param.pattern}', /var/log/app.log]\n" +
		"    params: {pattern: '.{1,64}'}\n    charset: {pattern: any}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, nil, "config", "validate", "--config", path)
	if code != 0 || !strings.Contains(stderr, "warning: diagnostics[0].charset.pattern: any") {
		t.Fatalf("exit %d, stderr %q: want 0 and a warning naming diagnostics[0].charset.pattern", code, stderr)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(body, "{pattern: any}", "{other: any}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, nil, "config", "validate", "--config", path)
	if code != 2 || !strings.Contains(stderr, "diagnostics[0].charset.other (line 5)") {
		t.Fatalf("exit %d, stderr %q: want 2 naming diagnostics[0].charset.other (line 5)", code, stderr)
	}
}
