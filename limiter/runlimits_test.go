package limiter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
)

// The conformance cases of the limits a run holds (concurrency slots, the
// failure breaker) and of shadow rules; runConformance runs them on every
// backend with the others.
func init() { conformanceCases = append(conformanceCases, runLimitCases...) }

func (e *env) done(r Request, outcome string) {
	e.t.Helper()
	if err := e.l.Done(context.Background(), r, outcome); err != nil {
		e.t.Fatalf("Done(%s, %s): %v", r.TaskID, outcome, err)
	}
}

func (e *env) inspect(r Request) []RuleState {
	e.t.Helper()
	st, err := e.l.Inspect(context.Background(), r)
	if err != nil {
		e.t.Fatalf("Inspect(%+v): %v", r, err)
	}
	return st
}

// holders returns the task ids holding a slot of the first rule Inspect reports.
func (e *env) holders(r Request) []string {
	e.t.Helper()
	st := e.inspect(r)
	if len(st) == 0 {
		e.t.Fatalf("Inspect(%+v): no rule state", r)
	}
	var ids []string
	for _, h := range st[0].Holders {
		ids = append(ids, h.TaskID)
	}
	return ids
}

// task returns r as task id with a lease.
func task(r Request, id string, lease time.Duration) Request {
	r.TaskID, r.Lease = id, lease
	return r
}

// calls returns how many allow.lua runs the Redis backend made (0 on memory).
func (e *env) calls() int64 {
	if e.redis == nil {
		return 0
	}
	return e.redis.calls.Load()
}

func failing(rule string, retry time.Duration) Decision {
	return denied(rule, LimitBreaker, ReasonFailing, retry)
}

var runLimitCases = []conformanceCase{
	{"concurrency: 8 at once, exactly 1 holder", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "heavy", Limits: []Limit{{Concurrency: Concurrency{Max: 1}}, {Daily: 100}}}), t0)
		const n = 8
		lease := 10 * time.Minute
		ds := make([]Decision, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				d, err := e.l.Allow(context.Background(), task(db1, fmt.Sprintf("t%d", i), lease))
				if err != nil || d.Degraded {
					t.Errorf("Allow t%d: %+v %v", i, d, err)
				}
				ds[i] = d
			})
		}
		wg.Wait()
		var holder string
		for i, d := range ds {
			switch {
			case d.Allowed:
				if holder != "" {
					t.Fatalf("t%d and %s both allowed", i, holder)
				}
				holder = fmt.Sprintf("t%d", i)
				if d.Counters.Running != 1 || d.Counters.ConcurrencyLimit != 1 || d.Counters.DailyUsed != 1 {
					t.Fatalf("allowed counters %+v, want running 1/1, daily 1", d.Counters)
				}
			case d.Reason != ReasonConcurrency || d.Limit != LimitConcurrency || d.OnExceed != OnExceedDefer || d.RetryAfter != lease:
				t.Fatalf("t%d: %s onExceed=%s, want concurrency denial, defer, retry %s", i, verdict(d), d.OnExceed, lease)
			}
		}
		if holder == "" {
			t.Fatal("no task allowed")
		}
		if got := e.holders(db1); !slices.Equal(got, []string{holder}) {
			t.Fatalf("holders %v, want [%s]", got, holder)
		}
		if c := e.check(task(db1, "probe", lease)); c.Counters.DailyUsed != 1 {
			t.Fatalf("denials consumed the daily quota: %+v", c.Counters)
		}
		if got := e.decisions("heavy", "denied", ReasonConcurrency); got != n-1 {
			t.Fatalf("decisions_total{denied,concurrency_exceeded} = %v, want %d", got, n-1)
		}
	}},
	{"concurrency: no slot taken when another limit denies", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "heavy", Limits: []Limit{{Concurrency: Concurrency{Max: 2}}, {Daily: 1}}}), t0)
		e.expect("a", task(db1, "a", time.Minute), allowed("heavy"))
		d := e.expect("b: daily denies", task(db1, "b", time.Minute), denied("heavy", LimitDaily, ReasonDaily, 14*time.Hour))
		if d.OnExceed != OnExceedDrop || d.Counters.Running != 1 {
			t.Fatalf("on_exceed %s, running %d; want drop (not a concurrency denial), 1", d.OnExceed, d.Counters.Running)
		}
		if got := e.holders(db1); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("holders %v, want [a]", got)
		}
	}},
	{"concurrency: the same task again keeps its one slot", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "heavy", Limits: []Limit{{Concurrency: Concurrency{Max: 2}}}}), t0)
		a := task(db1, "a", time.Minute)
		e.expect("a", a, allowed("heavy"))
		d := e.expect("a redelivered", a, allowed("heavy"))
		if d.Counters.Running != 1 {
			t.Fatalf("running %d, want 1", d.Counters.Running)
		}
		e.expect("b", task(db1, "b", time.Minute), allowed("heavy"))
	}},
	{"concurrency: released when the run ends", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "heavy", OnExceed: OnExceedDrop, Limits: []Limit{{Concurrency: Concurrency{Max: 1}}}}), t0)
		a, b := task(db1, "a", time.Hour), task(db1, "b", time.Hour)
		e.expect("a", a, allowed("heavy"))
		d := e.expect("b while a runs", b, denied("heavy", LimitConcurrency, ReasonConcurrency, time.Hour))
		if d.OnExceed != OnExceedDrop {
			t.Fatalf("on_exceed %s, want the configured drop", d.OnExceed)
		}
		e.clock.Add(time.Minute)
		e.done(a, OutcomeSucceeded)
		e.expect("b after a ended", b, allowed("heavy"))
		e.done(b, "released")
		if got := e.holders(db1); len(got) != 0 {
			t.Fatalf("holders %v after every run ended", got)
		}
		e.expect("c", task(db1, "c", time.Hour), allowed("heavy"))
	}},
	{"concurrency: a slot lapses with the lease, renewed with it", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "fleet", Key: KeyGlobal, Limits: []Limit{{Concurrency: Concurrency{Max: 1}}}}), t0)
		a, b := task(web1, "a", time.Minute), task(db1, "b", time.Minute)
		e.expect("a", a, allowed("fleet"))
		e.clock.Add(30 * time.Second)
		if err := e.l.Renew(context.Background(), a, time.Minute); err != nil {
			t.Fatal(err)
		}
		e.expect("b: a renewed to 1m from now", b, denied("fleet", LimitConcurrency, ReasonConcurrency, time.Minute))
		e.clock.Add(time.Minute - time.Millisecond)
		e.expect("b: retry at least 1s", b, denied("fleet", LimitConcurrency, ReasonConcurrency, time.Second))
		e.clock.Add(time.Millisecond) // a's agent died: no renewal, no Done
		e.expect("b after a's lease", b, allowed("fleet"))
		if err := e.l.Renew(context.Background(), a, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := e.holders(db1); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("holders %v, want [b]: a lapsed slot is not taken again by Renew", got)
		}
	}},
	{"breaker: opens at the 5th failure, one probe, reopens, closes", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "broken", Key: KeyHostDiagnostic,
			Breaker: &Breaker{Failures: 5, Window: 10 * time.Minute, OpenFor: 30 * time.Minute}}), t0)
		run := func(id, outcome string) {
			t.Helper()
			r := task(db1, id, 5*time.Minute)
			d := e.expect("run "+id, r, allowed("broken"))
			if d.Probe {
				t.Fatalf("run %s is a probe of a closed breaker", id)
			}
			e.clock.Add(time.Minute)
			e.done(r, outcome)
		}
		run("old", OutcomeFailed)
		e.clock.Add(10 * time.Minute) // "old" leaves the window
		for i := range 4 {
			run(fmt.Sprintf("f%d", i), []string{OutcomeFailed, OutcomeTimedOut}[i%2])
		}
		run("ok", OutcomeSucceeded) // a success of a non-probe closes nothing, resets nothing
		if st := e.inspect(db1); len(st) != 1 || st[0].Breaker != "closed" || st[0].Failures != 4 {
			t.Fatalf("inspect %+v, want closed with 4 failures", st)
		}
		run("f4", OutcomeFailed) // the 5th within 10m
		e.expect("open", task(db1, "x", time.Minute), failing("broken", 30*time.Minute))
		e.expect("other diagnostic, own breaker", task(Request{Host: db1.Host, Diagnostic: "cpu-top"}, "y", time.Minute), allowed("broken"))
		e.clock.Add(30*time.Minute - time.Microsecond)
		e.expect("last instant", task(db1, "x", time.Minute), failing("broken", time.Microsecond))
		e.clock.Add(time.Microsecond)
		p1 := task(db1, "p1", 5*time.Minute)
		if d := e.expect("probe", p1, allowed("broken")); !d.Probe {
			t.Fatal("the first run after open_for is not the probe")
		}
		e.expect("one probe only", task(db1, "x", time.Minute), failing("broken", 5*time.Minute))
		if st := e.inspect(db1); st[0].Breaker != "probing" || st[0].Probe != "p1" {
			t.Fatalf("inspect %+v, want probing p1", st)
		}
		e.clock.Add(time.Minute)
		e.done(p1, OutcomeFailed)
		e.expect("the probe failed: reopened", task(db1, "x", time.Minute), failing("broken", 30*time.Minute))
		e.clock.Add(30 * time.Minute)
		p2 := task(db1, "p2", 5*time.Minute)
		if d := e.expect("second probe", p2, allowed("broken")); !d.Probe {
			t.Fatal("no probe after the reopened period")
		}
		e.done(p2, OutcomeSucceeded)
		if st := e.inspect(db1); st[0].Breaker != "closed" || st[0].Failures != 0 {
			t.Fatalf("inspect %+v, want closed, no failures", st)
		}
		for i := range 4 {
			run(fmt.Sprintf("g%d", i), OutcomeFailed)
		}
		e.expect("closed: 4 failures since", task(db1, "z", time.Minute), allowed("broken"))
		if got := e.decisions("broken", "denied", ReasonFailing); got != 4 {
			t.Fatalf("decisions_total{denied,failing} = %v, want 4", got)
		}
	}},
	{"breaker: a probe whose agent died lapses with its lease", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "broken", Breaker: &Breaker{Failures: 1, Window: time.Minute, OpenFor: time.Minute}}), t0)
		a := task(web1, "a", time.Minute)
		e.expect("a", a, allowed("broken"))
		e.done(a, OutcomeFailed)
		e.clock.Add(time.Minute)
		e.expect("probe p", task(web1, "p", 2*time.Minute), allowed("broken"))
		e.clock.Add(2 * time.Minute) // p's agent died
		if d := e.expect("probe q", task(web1, "q", time.Minute), allowed("broken")); !d.Probe {
			t.Fatal("q is not the probe")
		}
	}},
	{"shadow rules count and never deny", func(t *testing.T, h harness) {
		e := h.setup(t, rules(
			Rule{Name: "default", Limits: []Limit{{Daily: 10}}},
			Rule{Name: "tighter", Shadow: true, Block: time.Hour, Limits: []Limit{{Daily: 1}}},
			Rule{Name: "slots", Shadow: true, Key: KeyHostDiagnostic, Limits: []Limit{{Concurrency: Concurrency{Max: 1}}}},
		), t0)
		before := e.calls()
		a, b := task(web1, "a", time.Hour), task(web1, "b", time.Hour)
		d := e.expect("a", a, allowed("default"))
		if len(d.Shadow) != 2 || !d.Shadow[0].Allowed || d.Shadow[0].Counters.DailyUsed != 1 || !d.Shadow[1].Allowed {
			t.Fatalf("shadows %+v, want both allowing, tighter used 1", d.Shadow)
		}
		d = e.expect("b", b, allowed("default"))
		want := []ShadowResult{
			{Rule: "tighter", Limit: LimitDaily, Reason: ReasonDaily, RetryAfter: 14 * time.Hour},
			{Rule: "slots", Limit: LimitConcurrency, Reason: ReasonConcurrency, RetryAfter: time.Hour},
		}
		for i, w := range want {
			if s := d.Shadow[i]; s.Rule != w.Rule || s.Allowed || s.Limit != w.Limit || s.Reason != w.Reason || s.RetryAfter != w.RetryAfter {
				t.Fatalf("shadow %d: %+v, want %+v", i, s, w)
			}
		}
		if d.Counters.DailyUsed != 2 {
			t.Fatalf("enforced daily used %d, want 2", d.Counters.DailyUsed)
		}
		if e.redis != nil {
			calls := e.calls() - before
			wantCalls := int64(2) // one EVALSHA per decision
			if e.redis.split {
				// The host+diagnostic shadow's key is in another slot: one
				// call more each, as Explain states.
				wantCalls = 2 * int64(e.l.Explain(t0)[0].ClusterCalls)
				if wantCalls != 4 {
					t.Fatalf("Explain states %d calls on a Cluster, want 2", wantCalls/2)
				}
			}
			if calls != wantCalls {
				t.Fatalf("%d allow.lua calls for 2 decisions, want %d", calls, wantCalls)
			}
		}
		e.done(a, OutcomeSucceeded)
		if st := e.inspect(web1); len(st) != 1 || st[0].Rule != "slots" || !st[0].Shadow || len(st[0].Holders) != 0 {
			t.Fatalf("inspect %+v, want the shadow's slot given back", st)
		}
		for _, rule := range []string{"tighter", "slots"} {
			if got := e.decisions(rule, "shadow_denied", map[string]string{"tighter": ReasonDaily, "slots": ReasonConcurrency}[rule]); got != 1 {
				t.Fatalf("decisions_total{rule=%s,shadow_denied} = %v, want 1", rule, got)
			}
			if got := e.decisions(rule, "denied", ReasonDaily) + e.decisions(rule, "allowed", ReasonAllowed); got != 0 {
				t.Fatalf("a shadow rule counted as a decision of its own: %v", got)
			}
		}
	}},
	{"shadow state is consumed only by runs", func(t *testing.T, h harness) {
		e := h.setup(t, rules(
			Rule{Name: "strict", Limits: []Limit{{Daily: 1}}},
			Rule{Name: "watch", Shadow: true, Key: KeyGlobal, Limits: []Limit{{Daily: 5}}},
		), t0)
		e.expect("1st", web1, allowed("strict"))
		d := e.expect("2nd: enforced denial", web1, denied("strict", LimitDaily, ReasonDaily, 14*time.Hour))
		if len(d.Shadow) != 1 || !d.Shadow[0].Allowed || d.Shadow[0].Counters.DailyUsed != 1 {
			t.Fatalf("shadow %+v, want allowing with 1 used (the denied task did not run)", d.Shadow)
		}
		d = e.expect("other host", db1, allowed("strict"))
		if d.Shadow[0].Counters.DailyUsed != 2 {
			t.Fatalf("shadow used %d, want 2", d.Shadow[0].Counters.DailyUsed)
		}
	}},
	{"first match is unaffected by shadows", func(t *testing.T, h harness) {
		e := h.setup(t, rules(
			Rule{Name: "everything", Shadow: true, Limits: []Limit{{Daily: 1}}},
			Rule{Name: "heavy", Match: Match{Diagnostic: []string{"full-dump"}}, Limits: []Limit{{Daily: 1}}},
			Rule{Name: "default", Match: Match{Host: "^db-"}, Limits: []Limit{{Daily: 2}}},
		), t0)
		e.expect("heavy", db1, allowed("heavy"))
		e.expect("heavy exhausted", db1, denied("heavy", LimitDaily, ReasonDaily, 14*time.Hour))
		d := e.expect("default", Request{Host: db1.Host, Diagnostic: "disk-usage"}, allowed("default"))
		if len(d.Shadow) != 1 || d.Shadow[0].Rule != "everything" || d.Shadow[0].Allowed {
			t.Fatalf("shadow %+v, want everything denying", d.Shadow)
		}
		e.expect("unmatched by enforced rules", Request{Host: web1.Host, Diagnostic: "x"}, Decision{Allowed: true, Rule: RuleNone, Reason: ReasonNoRule})
	}},
}

// TestShadowDenialLogged: a shadow rule's would-be denial is one log line
// naming the shadow rule and its reason (retry_after in seconds); the
// allowed task itself is not logged.
func TestShadowDenialLogged(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	cfg := rules(Rule{Name: "default", Limits: []Limit{{Daily: 10}}}, Rule{Name: "tighter", Shadow: true, Limits: []Limit{{Daily: 1}}})
	l, err := New(cfg, NewMemory(), Options{Clock: clock.NewManual(t0), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if d, err := l.Allow(context.Background(), task(web1, fmt.Sprint(i), 0)); err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v %v", d, err)
		}
	}
	var got map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &got); err != nil {
		t.Fatalf("want one JSON line: %v\n%s", err, buf.String())
	}
	want := map[string]any{"msg": "limiter shadow rule would deny task", "level": "INFO", "host": web1.Host, "task_id": "1",
		"rule": "tighter", "limit": LimitDaily, "reason": ReasonDaily, "retry_after": (14 * time.Hour).Seconds()}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("log %s = %v, want %v", k, got[k], v)
		}
	}
}
