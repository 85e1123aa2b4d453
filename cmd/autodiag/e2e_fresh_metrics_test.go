package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/internal/outcome"
)

// A fresh agent, before any task, alert or notification, already exposes
// every label set it can produce at 0: each catalog diagnostic × outcome,
// each alert source × result, each sink × event × result. Prometheus then
// sees the first increment as one, and increase() over it tells the truth.
func TestFreshAgentExposesEveryCounterAtZero(t *testing.T) {
	yaml := embeddedConfig + "notify:\n  - name: hook\n    type: webhook\n    url: 'http://127.0.0.1:9/hook'\n    allow_http: true\n    on: [succeeded, failed]\n"
	p := startProc(t, yaml)
	body := p.metrics()
	want := []string{}
	for _, d := range []string{"sleep", "uptime", "unknown"} {
		for _, o := range outcome.All() {
			want = append(want, fmt.Sprintf(`autodiag_task_outcomes_total{diagnostic=%q,outcome=%q} 0`, d, o))
		}
	}
	for _, s := range alert.Sources() {
		for _, r := range []string{alert.ResultAccepted, alert.ResultIgnored, alert.ResultRejected} {
			want = append(want, fmt.Sprintf(`autodiag_alerts_total{result=%q,source=%q} 0`, r, s))
		}
	}
	for _, e := range []string{"succeeded", "failed"} {
		for _, r := range []string{"delivered", "retry", "dead"} {
			want = append(want, fmt.Sprintf(`autodiag_notifications_total{event=%q,result=%q,sink="hook"} 0`, e, r))
		}
	}
	want = append(want, `autodiag_notifications_dropped_total{reason="outbox_full",sink="hook"} 0`,
		`autodiag_tasks_received_total 0`)
	for _, w := range want {
		if !strings.Contains(body, "\n"+w+"\n") {
			t.Errorf("fresh agent's /metrics lacks %s", w)
		}
	}
	// No diagnostic outside the catalog gets a series of its own.
	re := regexp.MustCompile(`autodiag_task_outcomes_total\{diagnostic="([^"]+)"`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		if m[1] != "sleep" && m[1] != "uptime" && m[1] != "unknown" {
			t.Errorf("series for diagnostic %q, not in the catalog", m[1])
		}
	}
}
