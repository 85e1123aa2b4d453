package agent

import (
	"context"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/outcome"
)

// TestDeferRequeuesAfterRetryAfter: a rule with on_exceed: defer hands the
// denied task back to the queue for retry_after instead of dropping it, and
// it runs once the limit allows.
func TestDeferRequeuesAfterRetryAfter(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, `
workers: 2
diagnostics:
  - {name: echo, command: [/bin/echo, "{id}"], timeout: 10s}
limiter:
  hosts: {allow: ['^[a-z0-9.-]+$']}
  rules:
    - name: spaced
      key: host
      limits: [{min_interval: 1s}]
      on_exceed: defer
lifecycle: {drain_timeout: 1m}
`)
	start := time.Now()
	ta.post(t, `{"id":"d-1","host":"web-01","diagnostic":"echo"}`)
	waitFor(t, "first run", func() bool { return ta.outcome(outcome.Succeeded) == 1 })
	ta.post(t, `{"id":"d-2","host":"web-01","diagnostic":"echo"}`)
	waitFor(t, "deferred task runs later", func() bool { return ta.outcome(outcome.Succeeded) == 2 })
	if ta.outcome(outcome.RateLimited) != 0 {
		t.Fatalf("a deferred task was dropped as rate_limited")
	}
	rec, ok, _ := ta.d.Store.Task(context.Background(), "d-2")
	if !ok || rec.Outcome != outcome.Succeeded || rec.Attempts != 2 {
		t.Fatalf("d-2 record = %+v, want succeeded on attempt 2 (deferred once)", rec)
	}
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Fatalf("d-2 ran %v after d-1, inside min_interval 1s", elapsed)
	}
	audit, _ := ta.d.Store.RecentAudit(context.Background(), 10)
	deferred := 0
	for _, e := range audit {
		if e.TaskID == "d-2" && e.Outcome == "deferred" {
			deferred++
		}
	}
	if deferred != 1 {
		t.Fatalf("audit has %d deferred entries for d-2, want 1", deferred)
	}
}
