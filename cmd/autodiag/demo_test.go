package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestDemoEndToEnd runs the built binary's `autodiag demo` and checks the
// three things it is for: a succeeded result, a rate_limited denial with
// its reason and retry time, and an investigation's report whose Evidence
// section cites task ids (the parent's and its tool calls') and whose Gaps
// section lists the refused call; then the drain, and exit 0. Where the
// test may make a network namespace (root, unshare), it runs the demo
// there too: it needs no network, not even loopback.
func TestDemoEndToEnd(t *testing.T) {
	check := func(t *testing.T, code int, stdout, stderr string) {
		t.Helper()
		if code != 0 {
			t.Fatalf("autodiag demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, want := range []string{
			"task demo-1: succeeded",
			"task demo-2: rate_limited (min_interval)", `"rule": "once-a-minute"`, `"retry_after_seconds":`,
			"task demo-3: failed", ": ran → task inv-", "not_offered",
			"report: ok (provider openai, model " + demoModelName,
			"## Evidence", "[task:demo-3]", "[task:inv-",
			"## Gaps", "could not check `delete-old-logs`",
			"drained: tasks succeeded 3, failed 1, rate_limited 1",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("autodiag demo's output lacks %q:\n%s", want, stdout)
			}
		}
	}
	t.Run("here", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, nil, "demo")
		check(t, code, stdout, stderr)
	})
	t.Run("unshare -n", func(t *testing.T) {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("no unshare here")
		}
		if err := exec.CommandContext(t.Context(), "unshare", "-n", "true").Run(); err != nil {
			t.Skipf("cannot make a network namespace here: %v", err)
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), "unshare", "-n", binPath, "demo")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := 0
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		check(t, code, stdout.String(), stderr.String())
	})
}
