package limiter

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestExplain(t *testing.T) {
	t.Parallel()
	cfg := rules(
		Rule{Name: "free"},
		Rule{Name: "sixty", Limits: []Limit{{Rate: &Rate{Count: 60, Per: 60 * time.Second, Burst: 2}}}},
		Rule{Name: "minute", Limits: []Limit{{Rate: &Rate{Count: 60, Per: time.Minute, Burst: 2}}}},
		Rule{Name: "mixed", Key: KeyGlobal, Fail: FailClosed, OnExceed: OnExceedDefer, Block: 90 * time.Second,
			Limits: []Limit{{Window: &Window{Count: 10, Per: time.Minute}}, {Daily: 100}}},
		Rule{Name: "flaky", Limits: []Limit{{MinInterval: time.Minute}},
			Breaker: &Breaker{Failures: 3, Window: 5 * time.Minute, OpenFor: time.Hour}},
	)
	cfg.Timezone = "America/New_York"
	l, err := New(cfg, NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	ex := l.Explain(now)
	if len(ex) != 5 {
		t.Fatalf("%d explanations, want 5", len(ex))
	}
	for _, tc := range []struct {
		i         int
		perSecond float64
		burst     int
		contains  []string
	}{
		{0, math.Inf(1), -1, []string{"never (no limits)", "fail: open"}},
		{1, 1, 120, []string{"60 per 1m0s, burst x2", "task 121 at once, or sustained above 1/s"}},
		{2, 1, 120, []string{"60 per 1m0s, burst x2"}},
		{3, 100.0 / 86400, 10, []string{"counted per global", "task 11 in a burst for one global (by window)",
			"block: 1m30s after any denial (sticky); on exceed: defer; fail: closed",
			"timezone: America/New_York; next reset: 2026-03-09T00:00:00-04:00"}},
		{4, 1.0 / 60, 1, []string{"denials start: task 2 in a burst for one host (by min_interval); " +
			"sooner for a host whose runs fail: once the breaker opens after 3 failed or timed_out runs within 5m0s\n"}},
	} {
		e := ex[tc.i]
		if e.PerSecond != tc.perSecond || e.Burst != tc.burst {
			t.Errorf("%s: %v/s burst %d, want %v/s burst %d", e.Rule, e.PerSecond, e.Burst, tc.perSecond, tc.burst)
		}
		for _, s := range tc.contains {
			if !strings.Contains(e.String(), s) {
				t.Errorf("%s: explanation lacks %q:\n%s", e.Rule, s, e)
			}
		}
	}
	if strings.ReplaceAll(ex[1].String(), "sixty", "minute") != ex[2].String() {
		t.Errorf("per: 60s and per: 1m explained differently:\n%s\n%s", ex[1], ex[2])
	}
}

func TestExplainRunLimits(t *testing.T) {
	t.Parallel()
	cfg := rules(
		Rule{Name: "heavy-per-host", Match: Match{Diagnostic: []string{"full-dump"}}, Limits: []Limit{{Concurrency: Concurrency{Max: 1}}, {Daily: 2}}},
		Rule{Name: "fleet-cap", Key: KeyGlobal, Limits: []Limit{{Concurrency: Concurrency{Max: 20}}}},
		Rule{Name: "broken-diagnostic", Key: KeyHostDiagnostic, Breaker: &Breaker{Failures: 5, Window: 10 * time.Minute, OpenFor: 30 * time.Minute}},
		Rule{Name: "try-tighter-quota", Shadow: true, Limits: []Limit{{Daily: 1}}},
		Rule{Name: "cpu-only", Shadow: true, Match: Match{Diagnostic: []string{"cpu-top"}}, Key: KeyDiagnostic, Limits: []Limit{{Daily: 1}}},
	)
	l, err := New(cfg, NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ex := l.Explain(t0)
	for _, tc := range []struct {
		i        int
		calls    int
		contains []string
	}{
		{0, 1, []string{"concurrency  1 at once (fleet-wide)",
			"denies a task while 1 runs for the same host hold a slot (held until the run ends, or its lease lapses); retry after the earliest holder's lease, at least 1s; on exceed: defer",
			"round trips: 1 EVALSHA per decision with shadows [try-tighter-quota]\n"}},
		{1, 3, []string{"20 at once (fleet-wide)", "task 21 in a burst for one global (by concurrency)",
			"round trips: 1 EVALSHA per decision with shadows [try-tighter-quota, cpu-only]; 3 on a Redis Cluster (keys in 3 hash slots)"}},
		{2, 3, []string{"denials start: when the breaker opens, after 5 failed or timed_out runs within 10m0s for one host+diagnostic " +
			"(no limit on how many run)\n",
			"breaker: opens after 5 failed or timed_out runs within 10m0s for one host+diagnostic; then denies (reason failing) for 30m0s and lets one probe through"}},
		{3, 1, []string{"shadow: never denies", `decision="shadow_denied"`}},
	} {
		e := ex[tc.i]
		if e.ClusterCalls != tc.calls {
			t.Errorf("%s: ClusterCalls %d, want %d", e.Rule, e.ClusterCalls, tc.calls)
		}
		for _, s := range tc.contains {
			if !strings.Contains(e.String(), s) {
				t.Errorf("%s: explanation lacks %q:\n%s", e.Rule, s, e)
			}
		}
	}
}
