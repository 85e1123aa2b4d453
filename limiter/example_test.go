package limiter_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

func Example() {
	cfg := limiter.DefaultConfig() // UTC, fail open, dedupe on alert.event_id for 10m
	cfg.Timezone = "America/Sao_Paulo"
	cfg.Rules = []limiter.Rule{{
		Name:   "default",
		Limits: []limiter.Limit{{Daily: 2}, {MinInterval: 2 * time.Hour}},
	}}
	// Embedded mode keeps state in memory; a fleet shares Redis instead:
	//   backend := limiter.NewRedis(redis.NewUniversalClient(opts), "autodiag:")
	backend := limiter.NewMemory()
	clock := clock.NewManual(time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC)) // stands still: the output is stable
	l, err := limiter.New(cfg, backend, limiter.Options{Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	task := limiter.Request{Host: "web-01.prod.example.com", Diagnostic: "disk-usage", Severity: "high", DedupeKey: "8812"}
	for _, event := range []string{"8812", "8812", "8813"} {
		task.DedupeKey = event
		d, err := l.Allow(ctx, task)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("event %s: allowed=%v duplicate=%v rule=%s reason=%s limit=%q retry_after=%s daily=%d/%d\n",
			event, d.Allowed, d.Duplicate, d.Rule, d.Reason, d.Limit, d.RetryAfter, d.Counters.DailyUsed, d.Counters.DailyLimit)
	}
	// Output:
	// event 8812: allowed=true duplicate=false rule=default reason=allowed limit="" retry_after=0s daily=1/2
	// event 8812: allowed=false duplicate=true rule=default reason=duplicate limit="" retry_after=0s daily=0/2
	// event 8813: allowed=false duplicate=false rule=default reason=min_interval limit="min_interval" retry_after=2h0m0s daily=1/2
}

func ExampleWriteExplain() {
	cfg := limiter.DefaultConfig()
	cfg.Timezone = "America/Sao_Paulo"
	cfg.Rules = []limiter.Rule{{
		Name:  "heavy",
		Match: limiter.Match{Diagnostic: []string{"full-dump"}, Host: "^db-", Severity: []string{"high", "disaster"}},
		Limits: []limiter.Limit{
			{Daily: 2},
			{MinInterval: 2 * time.Hour},
			{Window: &limiter.Window{Count: 10, Per: time.Minute}},
			{Rate: &limiter.Rate{Count: 15, Per: time.Second, Burst: 3}},
		},
		Block: time.Hour, Fail: limiter.FailClosed,
	}}
	l, err := limiter.New(cfg, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = limiter.WriteExplain(os.Stdout, l.Explain(time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC)))
	// Output:
	// rule heavy: match diagnostic in [full-dump] and host =~ ^db- and severity in [high, disaster], counted per host
	//   daily        2 per local day              0.000023/s sustained, 2 at once; denies task 3 of a local day (America/Sao_Paulo); resets at local midnight
	//   min_interval 2h0m0s                       0.000139/s sustained, 1 at once; denies a task less than 2h0m0s after the last allowed one
	//   window       10 per 1m0s (sliding)        0.166667/s sustained, 10 at once; denies task 11 within any 1m0s
	//   rate         15 per 1s, burst x3          15/s sustained, 45 at once; denies task 46 at once, or sustained above 15/s
	//   effective:   0.000023/s (0.083333/h), burst ceiling 1
	//   denials start: task 2 in a burst for one host (by min_interval)
	//   block: 1h0m0s after any denial (sticky); on exceed: drop; fail: closed
	//   timezone: America/Sao_Paulo; next reset: 2026-08-12T00:00:00-03:00
	// rule none: tasks no rule matches are allowed (counted as rule="none")
}

// ExampleLimiter_Done: the calls an agent makes around a run under a rule
// with a concurrency cap and a failure breaker: Allow with the task's id and
// lease, Renew with each lease renewal, Done with the outcome when the run
// ends.
func ExampleLimiter_Done() {
	cfg := limiter.DefaultConfig()
	cfg.Rules = []limiter.Rule{{
		Name:    "heavy-per-host",
		Match:   limiter.Match{Diagnostic: []string{"full-dump"}},
		Limits:  []limiter.Limit{{Concurrency: limiter.Concurrency{Max: 1}}, {Daily: 20}},
		Breaker: &limiter.Breaker{Failures: 5, Window: 10 * time.Minute, OpenFor: 30 * time.Minute},
	}, {
		Name:   "try-tighter-quota",
		Shadow: true,
		Limits: []limiter.Limit{{Daily: 1}},
	}}
	l, err := limiter.New(cfg, limiter.NewMemory(), limiter.Options{Clock: clock.NewManual(time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC))})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	lease := time.Minute // the task's execution lease (queue.visibility_timeout)
	a := limiter.Request{Host: "db-01", Diagnostic: "full-dump", TaskID: "task-a", Lease: lease}
	b := limiter.Request{Host: "db-01", Diagnostic: "full-dump", TaskID: "task-b", Lease: lease}
	show := func(name string, d limiter.Decision) {
		fmt.Printf("%s: allowed=%v reason=%s on_exceed=%s retry_after=%s running=%d/%d", name, d.Allowed, d.Reason,
			d.OnExceed, d.RetryAfter, d.Counters.Running, d.Counters.ConcurrencyLimit)
		for _, s := range d.Shadow {
			fmt.Printf(" shadow %s allowed=%v reason=%s", s.Rule, s.Allowed, s.Reason)
		}
		fmt.Println()
	}
	d, _ := l.Allow(ctx, a)
	show("a", d)
	_ = l.Renew(ctx, a, lease) // with every renewal of a's lease
	d, _ = l.Allow(ctx, b)
	show("b", d)
	_ = l.Done(ctx, a, outcome.Failed) // a's run ended: the slot is free, one failure counted
	d, _ = l.Allow(ctx, b)
	show("b", d)
	st, _ := l.Inspect(ctx, b)
	fmt.Printf("%s: holders=%s breaker=%s failures=%d\n", st[0].Rule, st[0].Holders[0].TaskID, st[0].Breaker, st[0].Failures)
	// Output:
	// a: allowed=true reason=allowed on_exceed=drop retry_after=0s running=1/1 shadow try-tighter-quota allowed=true reason=allowed
	// b: allowed=false reason=concurrency_exceeded on_exceed=defer retry_after=1m0s running=1/1 shadow try-tighter-quota allowed=false reason=daily_exceeded
	// b: allowed=true reason=allowed on_exceed=drop retry_after=0s running=1/1 shadow try-tighter-quota allowed=false reason=daily_exceeded
	// heavy-per-host: holders=task-b breaker=closed failures=1
}
