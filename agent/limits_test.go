package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// inspect returns the limiter's live state of the rules that apply to
// host and diagnostic.
func (ta *testAgent) inspect(t *testing.T, host, diagnostic string) []limiter.RuleState {
	t.Helper()
	st, err := ta.d.Limiter.Inspect(context.Background(), limiter.Request{Host: host, Diagnostic: diagnostic})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// auditOf returns the audit entries of task id, oldest first.
func (ta *testAgent) auditOf(t *testing.T, id string) []state.AuditEntry {
	t.Helper()
	all, err := ta.d.Store.RecentAudit(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []state.AuditEntry
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].TaskID == id {
			out = append(out, all[i])
		}
	}
	return out
}

// TestConcurrencySlotHeldForTheRun: an allowed run holds its concurrency
// slot under its task id, renewed with the lease past the first lease's
// end, and gives it back when it ends (before its outcome is counted); a
// task denied meanwhile is deferred and runs afterwards.
func TestConcurrencySlotHeldForTheRun(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second // queue.visibility_timeout below
	ta := startAgent(t, `
workers: 2
queue: {visibility_timeout: 2s}
diagnostics:
  - name: sleep
    command: [/bin/sleep, "{param.secs}"]
    params: {secs: '[0-9]+(\.[0-9]+)?'}
    timeout: 1m
limiter:
  hosts: {allow: ['^[a-z0-9.-]+$']}
  rules:
    - name: one-at-a-time
      match: {diagnostic: [sleep]}
      key: host
      limits: [{concurrency: 1}]
lifecycle: {drain_timeout: 1m}
`)
	const host = "web-01"
	holder := func() (limiter.Holder, bool) {
		st := ta.inspect(t, host, "sleep")
		if len(st) != 1 || len(st[0].Holders) == 0 {
			return limiter.Holder{}, false
		}
		return st[0].Holders[0], true
	}
	// The run lasts a lease and a half, so the slot outlives its first
	// lease only if it is renewed.
	runFor := lease + lease/2
	ta.post(t, fmt.Sprintf(`{"id":"c-1","host":"web-01","diagnostic":"sleep","params":{"secs":"%g"}}`, runFor.Seconds()))
	var first limiter.Holder
	waitFor(t, "c-1 holds the slot", func() bool {
		h, ok := holder()
		first = h
		return ok
	})
	if first.TaskID != "c-1" {
		t.Fatalf("holder = %+v, want c-1", first)
	}
	ta.post(t, `{"id":"c-2","host":"web-01","diagnostic":"sleep","params":{"secs":"0"}}`)
	waitFor(t, "c-2 deferred by the concurrency cap", func() bool {
		for _, e := range ta.auditOf(t, "c-2") {
			if e.Outcome == "deferred" && e.Reason == limiter.ReasonConcurrency {
				return true
			}
		}
		return false
	})
	waitFor(t, "c-1's slot renewed past its first lease", func() bool {
		h, ok := holder()
		return ok && h.TaskID == "c-1" && h.Expires.After(first.Expires)
	})
	waitFor(t, "c-1 ends", func() bool { return ta.outcome(outcome.Succeeded) >= 1 })
	// Its slot was given back before the outcome was counted, not left to
	// lapse with the lease.
	if h, ok := holder(); ok && h.TaskID == "c-1" {
		t.Fatalf("c-1 still holds its slot after it ended: %+v", h)
	}
	waitFor(t, "deferred c-2 runs", func() bool { return ta.outcome(outcome.Succeeded) == 2 })
	if got := ta.outcome(outcome.RateLimited); got != 0 {
		t.Fatalf("rate_limited = %d, want 0: a concurrency denial defers", got)
	}
	ended := ta.auditOf(t, "c-1")
	if n := len(ended); n == 0 || ended[n-1].Outcome != outcome.Succeeded || ended[n-1].Fields["rule"] != "one-at-a-time" {
		t.Fatalf("c-1 audit = %+v, want succeeded naming rule one-at-a-time", ended)
	}
}

// TestBreakerAndShadowInDecisionSummary: failed runs count for their
// rule's failure breaker (Done), which then denies with reason failing,
// lets one probe through after open_for and reopens when the probe fails;
// every task's audit entry names the shadow rule's verdict and the probe.
func TestBreakerAndShadowInDecisionSummary(t *testing.T) {
	t.Parallel()
	const openFor = time.Second // breaker.open_for below
	ta := startAgent(t, `
workers: 2
diagnostics:
  - name: fail
    command: [/bin/false]
    timeout: 10s
limiter:
  hosts: {allow: ['^[a-z0-9.-]+$']}
  rules:
    - name: broken
      match: {diagnostic: [fail]}
      key: host+diagnostic
      breaker: {failures: 2, window: 1m, open_for: 1s}
    - name: try-tighter
      shadow: true
      key: host
      limits: [{daily: 1}]
lifecycle: {drain_timeout: 1m}
`)
	broken := func() limiter.RuleState {
		for _, s := range ta.inspect(t, "web-01", "fail") {
			if s.Rule == "broken" {
				return s
			}
		}
		return limiter.RuleState{}
	}
	breaker := func() string { return broken().Breaker }
	ended := func(id string) state.AuditEntry {
		t.Helper()
		var last state.AuditEntry
		waitFor(t, id+" ends", func() bool {
			a := ta.auditOf(t, id)
			if len(a) == 0 || a[len(a)-1].Outcome == "deferred" {
				return false
			}
			last = a[len(a)-1]
			return true
		})
		return last
	}
	post := func(id string) state.AuditEntry {
		ta.post(t, `{"id":"`+id+`","host":"web-01","diagnostic":"fail"}`)
		return ended(id)
	}
	want := func(e state.AuditEntry, outcome, reason, shadow, probe string) {
		t.Helper()
		if e.Outcome != outcome || (reason != "" && e.Reason != reason) || e.Fields["rule"] != "broken" ||
			e.Fields["shadow"] != shadow || e.Fields["probe"] != probe {
			t.Fatalf("%s: audit = %+v, want outcome %s, reason %q, rule broken, shadow %q, probe %q",
				e.TaskID, e, outcome, reason, shadow, probe)
		}
	}
	want(post("f-1"), outcome.Failed, "", "try-tighter:allowed", "")
	if got := breaker(); got != "closed" {
		t.Fatalf("breaker after 1 failure = %q, want closed", got)
	}
	posted := time.Now()
	want(post("f-2"), outcome.Failed, "", "try-tighter:"+limiter.ReasonDaily, "")
	opened := broken()
	if opened.Breaker != "open" {
		t.Fatalf("breaker after 2 failures = %q, want open", opened.Breaker)
	}
	// Open for open_for from f-2's failure, which came after it was posted
	// and before it was seen to end (expiries are kept in µs).
	until := opened.OpenUntil
	if until.Before(posted.Add(openFor-time.Microsecond)) || until.After(time.Now().Add(openFor)) {
		t.Fatalf("breaker open until %s, want open_for %s after f-2's failure (posted %s)", until, openFor, posted)
	}
	want(post("f-3"), outcome.RateLimited, limiter.ReasonFailing, "try-tighter:"+limiter.ReasonDaily, "")

	var seen time.Time
	waitFor(t, "breaker half open after open_for", func() bool {
		half := breaker() == "half_open"
		seen = time.Now() // after the state was read
		return half
	})
	if seen.Before(until) {
		t.Fatalf("half open %v before open_for ended", until.Sub(seen))
	}
	want(post("f-4"), outcome.Failed, "", "try-tighter:"+limiter.ReasonDaily, "true")
	if got := breaker(); got != "open" {
		t.Fatalf("breaker after the failed probe = %q, want open again", got)
	}
}
