package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/internal/fake/openaifake"
)

// In embedded mode `autodiag report ID` has the running agent write the
// report through its own report cooldown: right after the agent's own
// report of a failed task, the command is rate limited and the model is
// not asked a second time; --force skips the cooldown and asks it.
func TestReportEmbeddedUsesTheAgentsCooldown(t *testing.T) {
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	yaml := strings.Replace(embeddedConfig, "limiter:\n", "  - name: broken\n    command: [/bin/false]\n    timeout: 10s\nlimiter:\n", 1) +
		fmt.Sprintf("report:\n  enabled: true\n  provider: openai\n  model: e2e-model\n  base_url: '%s'\n  api_key_env: %s\n"+
			"  timeout: %s\n  limits:\n    - min_interval: 1h\n    - daily: 100\n", fake.BaseURL(), reportKeyEnv, reportTimeout)
	env := []string{reportKeyEnv + "=" + reportKey}
	p := startProc(t, yaml, env...)
	cfgPath := sqsWriteConfig(t, yaml)
	if code, out := p.post("/v1/tasks", `{"id":"emb-rep-1","host":"web-01","diagnostic":"broken"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: %d %v", code, out)
	}
	eventually(t, reportTimeout+loadAllowance, "the agent's own report", func() bool { return len(fake.Requests()) == 1 })
	eventually(t, reportTimeout+loadAllowance, "the report in the record", func() bool {
		code, out, _ := runCLI(t, nil, "show", "emb-rep-1", "--json", "--config", cfgPath, "--admin-addr", p.Addr())
		return code == 0 && strings.Contains(out, `"status": "ok"`)
	})
	code, stdout, stderr := runCLI(t, env, "report", "emb-rep-1", "--config", cfgPath, "--admin-addr", p.Addr())
	if code != 1 || !strings.Contains(stdout, "rate_limited") {
		t.Fatalf("report within the cooldown: exit %d %q %s, want 1 and rate_limited", code, stdout, stderr)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("the model was asked %d times, want once: the command must go through the agent's cooldown", n)
	}
	code, stdout, stderr = runCLI(t, env, "report", "emb-rep-1", "--force", "--config", cfgPath, "--admin-addr", p.Addr())
	if code != 0 || !strings.Contains(stdout, "report: ok") {
		t.Fatalf("report --force: exit %d %q %s, want 0 and an ok report", code, stdout, stderr)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("after --force the model was asked %d times, want 2", n)
	}
}
