package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTimespan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"900": 900 * time.Second, "15min": 15 * time.Minute, "1h 30s": time.Hour + 30*time.Second,
		"10m": 10 * time.Minute, "2.5s": 2500 * time.Millisecond, "1min30s": 90 * time.Second,
	} {
		if got, err := parseTimespan(in); err != nil || got != want {
			t.Errorf("parseTimespan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "soon", "5 fortnights", "-5s"} {
		if _, err := parseTimespan(bad); err == nil {
			t.Errorf("parseTimespan(%q) accepted", bad)
		}
	}
}

// TestConfigValidateSystemdUnit: config validate --systemd-unit refuses a
// unit whose stop timeout would cut a drain short, and accepts the shipped
// unit with the shipped config.
func TestConfigValidateSystemdUnit(t *testing.T) {
	example := filepath.Join("..", "..", "deploy", "config", "example.yaml")
	shipped := filepath.Join("..", "..", "deploy", "systemd", "autodiag.service")
	// The example's imds source needs an instance id (see TestConfigValidateCLI).
	exampleEnv := []string{"AUTODIAG_INSTANCE_ID=i-0123456789abcdef0", "AWS_EC2_METADATA_DISABLED=true"}
	if code, out, errOut := runCLI(t, exampleEnv, "config", "validate", "--config", example, "--systemd-unit", shipped); code != 0 {
		t.Fatalf("shipped unit + example config: exit %d\n%s%s", code, out, errOut)
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		unit string
		ok   bool
	}{
		"short":    {"[Service]\nTimeoutStopSec=5min\n", false},
		"default":  {"[Service]\nExecStart=/usr/local/bin/autodiag run\n", false},
		"timeout":  {"[Service]\nTimeoutSec=20min\n", true},
		"last":     {"[Service]\nTimeoutStopSec=20min\nTimeoutStopSec=9min\n", false},
		"infinity": {"[Service]\nTimeoutStopSec=infinity\n", true},
		"garbage":  {"[Service]\nTimeoutStopSec=later\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name+".service")
			if err := os.WriteFile(p, []byte(tc.unit), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, errOut := runCLI(t, exampleEnv, "config", "validate", "--config", example, "--systemd-unit", p)
			if tc.ok && code != 0 || !tc.ok && code != 2 {
				t.Fatalf("exit %d (want ok=%v): %s", code, tc.ok, errOut)
			}
			if !tc.ok && name != "garbage" && !strings.Contains(errOut, "lifecycle.drain_timeout") {
				t.Fatalf("error does not name lifecycle.drain_timeout: %s", errOut)
			}
		})
	}
}

// TestUsageExitCodes: every kind of command-line mistake exits 2 through a
// typed error, whatever cobra's wording; a runtime failure exits 1.
func TestUsageExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"unknown command", []string{"frobnicate"}, exitUsage},
		{"unknown flag", []string{"status", "--bogus"}, exitUsage},
		{"flag without its value", []string{"drain", "--admin-addr"}, exitUsage},
		{"invalid flag value", []string{"status", "--recent", "many"}, exitUsage},
		{"extra argument", []string{"run", "extra"}, exitUsage},
		{"required flag missing", []string{"limits", "check", "--host", "web-01"}, exitUsage},
		{"missing config file", []string{"config", "validate", "--config", "/nonexistent/autodiag.yaml"}, exitUsage},
		{"help", []string{"--help"}, exitOK},
		{"no command", nil, exitOK},
		{"agent unreachable", []string{"drain", "--admin-addr", "127.0.0.1:1"}, exitRuntime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			if got := run(tc.args, &out, &errOut); got != tc.want {
				t.Fatalf("run(%q) = %d, want %d; stderr %q", tc.args, got, tc.want, errOut.String())
			}
		})
	}
}
