package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// In embedded mode `limits check` asks the running agent's limiter: after
// one run of uptime on web-01, a min_interval rule denies the next, and
// the check says so (a fresh limiter in the CLI would say allowed).
func TestLimitsCheckAsksTheRunningAgent(t *testing.T) {
	yaml := strings.Replace(embeddedConfig, "  rules: []\n",
		"  rules:\n    - name: spacing\n      key: host\n      limits: [{min_interval: 1h}]\n", 1)
	// The agent answers for web-01 alone: its runs are limited under it.
	p := startProc(t, yaml, "AUTODIAG_HOST_NAMES=web-01")
	cfgPath := sqsWriteConfig(t, yaml)
	check := func() map[string]any {
		t.Helper()
		code, out, stderr := runCLI(t, nil, "limits", "check", "--config", cfgPath, "--admin-addr", p.Addr(),
			"--host", "web-01", "--diagnostic", "uptime")
		if code != 0 {
			t.Fatalf("limits check: exit %d %q %q", code, out, stderr)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("limits check output: %v\n%s", err, out)
		}
		return v
	}
	if v := check(); v["allowed"] != true {
		t.Fatalf("before any run: %v, want allowed", v)
	}
	if code, out := p.post("/v1/tasks", `{"id":"lim-1","host":"web-01","diagnostic":"uptime"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: %d %v", code, out)
	}
	eventually(t, 10*time.Second+loadAllowance, "the task ended", func() bool {
		return metricSum(p, "autodiag_task_outcomes_total", `diagnostic="uptime"`, `outcome="succeeded"`) == 1
	})
	v := check()
	if v["allowed"] != false || v["rule"] != "spacing" || v["limit"] != "min_interval" {
		t.Fatalf("after a run: %v, want denied by spacing's min_interval as the agent would", v)
	}
}
