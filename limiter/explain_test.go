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
	)
	cfg.Timezone = "America/New_York"
	l, err := New(cfg, NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	ex := l.Explain(now)
	if len(ex) != 4 {
		t.Fatalf("%d explanations, want 4", len(ex))
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
