package main

import (
	"strings"
	"testing"
)

// `config validate` warns for a variable named by a *_env key that is
// unset (run would exit 2 on it), and --strict fails on it.
func TestConfigValidateUnsetEnv(t *testing.T) {
	cfgPath := sqsWriteConfig(t, embeddedConfig+"notify:\n  - name: hook\n    type: webhook\n    url_env: E2E_UNSET_HOOK_URL\n    on: [failed]\n")
	code, stdout, stderr := runCLI(t, nil, "config", "validate", "--config", cfgPath)
	if code != 0 || !strings.Contains(stderr, "notify[0].url_env: E2E_UNSET_HOOK_URL is unset") || !strings.Contains(stdout, "ok") {
		t.Fatalf("validate: exit %d %q %q, want 0 with a warning naming notify[0].url_env", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "config", "validate", "--strict", "--config", cfgPath); code != 2 || !strings.Contains(stderr, "E2E_UNSET_HOOK_URL") {
		t.Fatalf("validate --strict: exit %d %q, want 2", code, stderr)
	}
	env := []string{"E2E_UNSET_HOOK_URL=https://hooks.example.com/x"}
	if code, _, stderr := runCLI(t, env, "config", "validate", "--strict", "--config", cfgPath); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("validate --strict with the variable set: exit %d %q, want 0 and no warning", code, stderr)
	}
}
