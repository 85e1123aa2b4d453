package limiter

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// harness opens one kind of backend for the conformance suite.
type harness struct {
	name string
	// client returns the Redis client of the harness, nil for memory.
	client func(t *testing.T) redis.UniversalClient
	// zset keeps every window in a sorted set, as windows larger than
	// the state key's log are.
	zset bool
}

func memoryHarness() harness { return harness{name: "memory"} }

func redisHarness() harness {
	return harness{name: "redis", client: func(t *testing.T) redis.UniversalClient { return testRedis(t) }}
}

// env is one conformance case's limiter with its fake clock and backend.
type env struct {
	t      *testing.T
	l      *Limiter
	clock  *clock.Manual
	reg    *prometheus.Registry
	mem    *Memory
	client redis.UniversalClient
	redis  *Redis
	prefix string
}

func (h harness) setup(t *testing.T, cfg Config, start time.Time) *env {
	t.Helper()
	e := &env{t: t, clock: clock.NewManual(start), reg: prometheus.NewRegistry()}
	var b Backend
	if h.client == nil {
		e.mem = NewMemory()
		b = e.mem
	} else {
		e.client = h.client(t)
		e.prefix = uniquePrefix(t)
		e.redis = NewRedis(e.client, e.prefix)
		if h.zset {
			e.redis.logMax = 0
		}
		b = e.redis
	}
	l, err := New(cfg, b, Options{Clock: e.clock, Registerer: e.reg, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.l = l
	return e
}

func (e *env) allow(r Request) Decision {
	e.t.Helper()
	d, err := e.l.Allow(context.Background(), r)
	if err != nil {
		e.t.Fatalf("Allow(%+v): %v", r, err)
	}
	if d.Degraded {
		e.t.Fatalf("Allow(%+v) degraded: %+v", r, d)
	}
	return d
}

func (e *env) check(r Request) Decision {
	e.t.Helper()
	d, err := e.l.Check(context.Background(), r)
	if err != nil {
		e.t.Fatalf("Check(%+v): %v", r, err)
	}
	return d
}

// expect runs Allow (or Check when dry) and compares the decision's verdict
// fields, RetryAfter included, with want.
func (e *env) expect(step string, r Request, want Decision) Decision {
	e.t.Helper()
	got := e.allow(r)
	if got.Allowed != want.Allowed || got.Duplicate != want.Duplicate || got.Rule != want.Rule ||
		got.Limit != want.Limit || got.Reason != want.Reason || got.RetryAfter != want.RetryAfter {
		e.t.Fatalf("%s at %s: got  %s\nwant %s", step, e.clock.Now().Format(time.RFC3339Nano), verdict(got), verdict(want))
	}
	return got
}

func verdict(d Decision) string {
	return fmt.Sprintf("allowed=%v dup=%v rule=%s limit=%s reason=%s retry=%s counters=%+v",
		d.Allowed, d.Duplicate, d.Rule, d.Limit, d.Reason, d.RetryAfter, d.Counters)
}

func allowed(rule string) Decision { return Decision{Allowed: true, Rule: rule, Reason: ReasonAllowed} }

func denied(rule, limit, reason string, retry time.Duration) Decision {
	return Decision{Rule: rule, Limit: limit, Reason: reason, RetryAfter: retry}
}

// dailyTTL reports the remaining TTL of the daily counter of (tag, rule,
// day). On Redis that is the TTL of the rule's state key, which holds the
// counter (with its day) and lives as long as its longest-lived part: in a
// rule with only a daily limit, until the next local midnight.
func (e *env) dailyTTL(tag, rule, day string) (time.Duration, bool) {
	e.t.Helper()
	if e.mem != nil {
		return e.mem.dailyTTL(tag, rule, e.clock.Now().UnixMicro())
	}
	key := e.prefix + "lim:{" + tag + "}:s:" + rule
	if v, err := e.client.Get(context.Background(), key).Bytes(); err != nil || len(v) < 40 ||
		fmt.Sprint(binary.LittleEndian.Uint64(v[8:16])) != day {
		e.t.Fatalf("state key %s: %x (%v), want the daily count of day %s", key, v, err, day)
	}
	ttl, err := e.client.PTTL(context.Background(), key).Result()
	if err != nil {
		e.t.Fatalf("PTTL %s: %v", key, err)
	}
	return ttl, ttl > 0
}

// checkTTL asserts the daily key's TTL is want (Redis: its TTL runs on the
// server's clock, so up to a few seconds of real time may have elapsed).
func (e *env) checkTTL(tag, rule, day string, want time.Duration) {
	e.t.Helper()
	got, ok := e.dailyTTL(tag, rule, day)
	if !ok {
		e.t.Fatalf("daily key %s/%s/%s: no TTL", tag, rule, day)
	}
	slack := time.Duration(0)
	if e.mem == nil {
		slack = 5 * time.Second
	}
	if got > want || got < want-slack {
		e.t.Fatalf("daily key %s/%s/%s: TTL %s, want %s", tag, rule, day, got, want)
	}
}

func (e *env) decisions(rule, decision, reason string) float64 {
	return testutil.ToFloat64(e.l.metrics.decisions.WithLabelValues(rule, decision, reason))
}

type conformanceCase struct {
	name string
	run  func(t *testing.T, h harness)
}

func rules(rs ...Rule) Config {
	c := DefaultConfig()
	c.Rules = rs
	return c
}

var (
	t0   = time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC)
	web1 = Request{Host: "web-01.prod.example.com", Diagnostic: "disk-usage", Severity: "high"}
	db1  = Request{Host: "db-01.prod.example.com", Diagnostic: "full-dump", Severity: "high"}
)

var conformanceCases = []conformanceCase{
	{"daily quota", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Daily: 2}}}), t0)
		toMidnight := 14 * time.Hour
		e.expect("1st", web1, allowed("default"))
		d := e.expect("2nd", web1, allowed("default"))
		if d.Counters.DailyUsed != 2 || d.Counters.DailyLimit != 2 {
			t.Fatalf("counters %+v, want daily 2/2", d.Counters)
		}
		d = e.expect("3rd", web1, denied("default", LimitDaily, ReasonDaily, toMidnight))
		if d.Counters.DailyUsed != 2 {
			t.Fatalf("denial counters %+v, want daily used 2", d.Counters)
		}
		e.expect("other host", db1, allowed("default"))
		if got := e.decisions("default", "denied", ReasonDaily); got != 1 {
			t.Fatalf("decisions_total{denied,daily_exceeded} = %v, want 1", got)
		}
		if got := e.decisions("default", "allowed", ReasonAllowed); got != 3 {
			t.Fatalf("decisions_total{allowed} = %v, want 3", got)
		}
	}},
	{"midnight rollover across DST", func(t *testing.T, h harness) {
		for _, tc := range []struct {
			name, zone  string
			at          time.Time // first task, local
			day         string
			ttl         time.Duration // from at to the next local midnight
			nextDayUTC  time.Time     // first instant of the next local day
			nextDayName string
		}{
			{"new york spring forward (23h day)", "America/New_York",
				time.Date(2026, 3, 8, 0, 30, 0, 0, mustLoc(t, "America/New_York")), "20260308",
				22*time.Hour + 30*time.Minute, time.Date(2026, 3, 9, 4, 0, 0, 0, time.UTC), "20260309"},
			{"new york fall back (25h day)", "America/New_York",
				time.Date(2026, 11, 1, 0, 30, 0, 0, mustLoc(t, "America/New_York")), "20261101",
				24*time.Hour + 30*time.Minute, time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC), "20261102"},
			{"sao paulo DST start skips midnight", "America/Sao_Paulo",
				time.Date(2018, 11, 3, 12, 0, 0, 0, mustLoc(t, "America/Sao_Paulo")), "20181103",
				12 * time.Hour, time.Date(2018, 11, 4, 3, 0, 0, 0, time.UTC), "20181104"},
			{"sao paulo DST end (25h day)", "America/Sao_Paulo",
				time.Date(2019, 2, 16, 12, 0, 0, 0, mustLoc(t, "America/Sao_Paulo")), "20190216",
				13 * time.Hour, time.Date(2019, 2, 17, 3, 0, 0, 0, time.UTC), "20190217"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := rules(Rule{Name: "default", Limits: []Limit{{Daily: 1}}})
				cfg.Timezone = tc.zone
				e := h.setup(t, cfg, tc.at)
				e.expect("first", web1, allowed("default"))
				e.checkTTL(web1.Host, "default", tc.day, tc.ttl)
				e.clock.Set(tc.nextDayUTC.Add(-time.Microsecond))
				e.expect("last instant of the day", web1, denied("default", LimitDaily, ReasonDaily, time.Microsecond))
				e.clock.Set(tc.nextDayUTC)
				e.expect("first instant of the next day", web1, allowed("default"))
				_, end := dayBounds(tc.nextDayUTC, mustLoc(t, tc.zone))
				e.checkTTL(web1.Host, "default", tc.nextDayName, end.Sub(tc.nextDayUTC))
				e.expect("second of the next day", web1, denied("default", LimitDaily, ReasonDaily, end.Sub(tc.nextDayUTC)))
			})
		}
	}},
	{"min interval", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{MinInterval: 2 * time.Hour}}}), t0)
		d := e.expect("first", web1, allowed("default"))
		if d.Counters.SinceLast != -1 {
			t.Fatalf("first run SinceLast = %s, want -1", d.Counters.SinceLast)
		}
		e.clock.Add(30 * time.Minute)
		d = e.expect("30m later", web1, denied("default", LimitMinInterval, ReasonMinInterval, 90*time.Minute))
		if d.Counters.SinceLast != 30*time.Minute {
			t.Fatalf("SinceLast = %s, want 30m", d.Counters.SinceLast)
		}
		e.clock.Add(90*time.Minute - time.Microsecond)
		e.expect("just before 2h", web1, denied("default", LimitMinInterval, ReasonMinInterval, time.Microsecond))
		e.clock.Add(time.Microsecond)
		e.expect("at 2h", web1, allowed("default"))
	}},
	{"sliding window catches the fixed-window boundary burst", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Window: &Window{Count: 10, Per: time.Minute}}}}), t0)
		boundary := t0.Add(time.Minute) // 10:01:00, a fixed-minute boundary
		for i := range 10 {             // 10:00:50.0 .. 10:00:59.0
			e.clock.Set(boundary.Add(-10*time.Second + time.Duration(i)*time.Second))
			e.expect(fmt.Sprintf("before boundary #%d", i), web1, allowed("default"))
		}
		for i := range 10 { // 10:01:00.0 .. 10:01:09.0: a fixed window would allow all 10
			e.clock.Set(boundary.Add(time.Duration(i) * time.Second))
			d := e.expect(fmt.Sprintf("after boundary #%d", i), web1,
				denied("default", LimitWindow, ReasonWindow, 50*time.Second-time.Duration(i)*time.Second))
			if d.Counters.WindowCount != 10 || d.Counters.WindowLimit != 10 {
				t.Fatalf("window counters %+v, want 10/10", d.Counters)
			}
		}
		e.clock.Set(boundary.Add(50*time.Second - time.Microsecond))
		e.expect("just before the oldest leaves", web1, denied("default", LimitWindow, ReasonWindow, time.Microsecond))
		e.clock.Set(boundary.Add(50 * time.Second))
		d := e.expect("oldest left the window", web1, allowed("default"))
		if d.Counters.WindowCount != 10 {
			t.Fatalf("window count after = %d, want 10 (never more than count)", d.Counters.WindowCount)
		}
		e.expect("window full again", web1, denied("default", LimitWindow, ReasonWindow, time.Second))
	}},
	{"daily count resets at midnight while other parts live on", func(t *testing.T, h harness) {
		// The window keeps the rule's state for 48h; the day's count must
		// still start again at local midnight.
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Daily: 1}, {Window: &Window{Count: 10, Per: 48 * time.Hour}}}}), t0)
		e.expect("first", web1, allowed("default"))
		e.expect("second, same day", web1, denied("default", LimitDaily, ReasonDaily, 14*time.Hour))
		if e.redis != nil && e.redis.logMax >= 10 { // the window is in the state key
			key := e.prefix + "lim:{" + web1.Host + "}:s:default"
			if ttl := e.client.PTTL(context.Background(), key).Val(); ttl < 47*time.Hour || ttl > 48*time.Hour {
				t.Fatalf("state key TTL %s, want the window's 48h", ttl)
			}
		}
		midnight := time.Date(2026, 8, 12, 0, 0, 0, 0, time.UTC)
		e.clock.Set(midnight)
		d := e.expect("next day", web1, allowed("default"))
		if d.Counters.DailyUsed != 1 || d.Counters.WindowCount != 2 {
			t.Fatalf("counters %+v, want daily 1 (new day), window 2", d.Counters)
		}
		e.expect("second of the next day", web1, denied("default", LimitDaily, ReasonDaily, 24*time.Hour))
	}},
	{"large window", func(t *testing.T, h harness) {
		const count = 100 // above defaultWindowLogMax: a sorted set on Redis
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Window: &Window{Count: count, Per: time.Minute}}}}), t0)
		for i := range count {
			e.expect(fmt.Sprintf("run %d", i), web1, allowed("default"))
			e.clock.Add(100 * time.Millisecond)
		}
		// now = t0+10s; the oldest run (t0) leaves the window at t0+1m.
		d := e.expect("full", web1, denied("default", LimitWindow, ReasonWindow, 50*time.Second))
		if d.Counters.WindowCount != count {
			t.Fatalf("window count %d, want %d", d.Counters.WindowCount, count)
		}
		e.clock.Set(t0.Add(time.Minute))
		d = e.expect("the oldest left", web1, allowed("default"))
		if d.Counters.WindowCount != count {
			t.Fatalf("window count %d, want %d (never more than count)", d.Counters.WindowCount, count)
		}
		e.expect("full again", web1, denied("default", LimitWindow, ReasonWindow, 100*time.Millisecond))
	}},
	{"rate burst ceiling", func(t *testing.T, h harness) {
		for _, per := range []time.Duration{time.Second, 1000 * time.Millisecond} {
			t.Run(per.String(), func(t *testing.T) {
				e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Rate: &Rate{Count: 15, Per: per, Burst: 3}}}}), t0)
				for i := range 45 {
					e.expect(fmt.Sprintf("burst #%d", i), web1, allowed("default"))
				}
				emission := 66667 * time.Microsecond // ceil(1s/15)
				d := e.expect("over the ceiling", web1, denied("default", LimitRate, ReasonRate, emission))
				if d.Counters.BucketCapacity != 45 || d.Counters.BucketLevel != 45 {
					t.Fatalf("bucket %v/%v, want 45/45", d.Counters.BucketLevel, d.Counters.BucketCapacity)
				}
				e.clock.Add(emission)
				e.expect("one leaked", web1, allowed("default"))
				e.expect("full again", web1, denied("default", LimitRate, ReasonRate, emission))
			})
		}
	}},
	{"per 60s equals per 1m", func(t *testing.T, h harness) {
		var got [2][]string
		for i, per := range []time.Duration{60 * time.Second, time.Minute} {
			e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Rate: &Rate{Count: 3, Per: per}}, {Window: &Window{Count: 2, Per: per}}}}), t0)
			for range 4 {
				got[i] = append(got[i], verdict(e.allow(web1)))
				e.clock.Add(10 * time.Second)
			}
		}
		if strings.Join(got[0], "\n") != strings.Join(got[1], "\n") {
			t.Fatalf("60s and 1m differ:\n%s\n--\n%s", strings.Join(got[0], "\n"), strings.Join(got[1], "\n"))
		}
	}},
	{"block is sticky", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "default", Block: time.Hour, Limits: []Limit{{MinInterval: 10 * time.Minute}}}), t0)
		e.expect("first", web1, allowed("default"))
		e.clock.Add(time.Minute)
		e.expect("too soon: denied, block set", web1, denied("default", LimitMinInterval, ReasonMinInterval, time.Hour))
		e.clock.Add(14 * time.Minute) // min interval has recovered
		e.expect("still blocked", web1, denied("default", LimitBlock, ReasonBlocked, 46*time.Minute))
		e.clock.Add(46*time.Minute - time.Microsecond)
		e.expect("last instant of the block", web1, denied("default", LimitBlock, ReasonBlocked, time.Microsecond))
		e.clock.Add(time.Microsecond)
		e.expect("block over", web1, allowed("default"))
		e.expect("other host never blocked", db1, allowed("default"))
	}},
	{"dedupe", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{{Daily: 2}}}), t0)
		ev := web1
		ev.DedupeKey = "8812"
		e.expect("first", ev, allowed("default"))
		d := e.expect("same event", ev, Decision{Duplicate: true, Rule: "default", Reason: ReasonDuplicate})
		if d.Allowed {
			t.Fatal("duplicate must not be allowed")
		}
		if c := e.check(web1); c.Counters.DailyUsed != 1 {
			t.Fatalf("daily used after a duplicate = %d, want 1 (consumes nothing)", c.Counters.DailyUsed)
		}
		other := ev
		other.Diagnostic = "cpu-top"
		e.expect("same event, other diagnostic", other, allowed("default"))
		e.expect("quota exhausted", Request{Host: web1.Host, Diagnostic: "x", DedupeKey: "9000"},
			denied("default", LimitDaily, ReasonDaily, 14*time.Hour))
		e.expect("a denied event is not remembered", Request{Host: web1.Host, Diagnostic: "x", DedupeKey: "9000"},
			denied("default", LimitDaily, ReasonDaily, 14*time.Hour))
		e.clock.Add(10*time.Minute - time.Microsecond)
		e.expect("still a duplicate", ev, Decision{Duplicate: true, Rule: "default", Reason: ReasonDuplicate})
		e.clock.Add(time.Microsecond)
		e.expect("ttl passed: counted again", ev, denied("default", LimitDaily, ReasonDaily, 14*time.Hour-10*time.Minute))
		if got := e.decisions("default", "duplicate", ReasonDuplicate); got != 2 {
			t.Fatalf("decisions_total{duplicate} = %v, want 2", got)
		}
	}},
	{"dedupe without a matching rule", func(t *testing.T, h harness) {
		e := h.setup(t, rules(), t0)
		ev := web1
		ev.DedupeKey = "1"
		e.expect("first", ev, Decision{Allowed: true, Rule: RuleNone, Reason: ReasonNoRule})
		e.expect("again", ev, Decision{Duplicate: true, Rule: RuleNone, Reason: ReasonDuplicate})
	}},
	{"consume only if all allow", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "default", Limits: []Limit{
			{Daily: 3}, {Window: &Window{Count: 1, Per: time.Minute}}, {Rate: &Rate{Count: 1, Per: time.Second, Burst: 5}},
		}}), t0)
		e.expect("first", web1, allowed("default"))
		for i := range 5 {
			e.clock.Add(time.Second)
			e.expect(fmt.Sprintf("window denies #%d", i), web1,
				denied("default", LimitWindow, ReasonWindow, time.Minute-time.Duration(i+1)*time.Second))
		}
		c := e.check(web1)
		if c.Counters.DailyUsed != 1 || c.Counters.BucketLevel != 0 || c.Counters.WindowCount != 1 {
			t.Fatalf("a window denial consumed other limits: %+v", c.Counters)
		}
		e.clock.Set(t0.Add(time.Minute))
		d := e.expect("window recovered", web1, allowed("default"))
		if d.Counters.DailyUsed != 2 {
			t.Fatalf("daily used = %d, want 2", d.Counters.DailyUsed)
		}
	}},
	{"first matching rule wins", func(t *testing.T, h harness) {
		e := h.setup(t, rules(
			Rule{Name: "heavy", Match: Match{Diagnostic: []string{"full-dump"}, Host: "^db-", Severity: []string{"high", "disaster"}},
				Limits: []Limit{{Daily: 1}}},
			Rule{Name: "default", Limits: []Limit{{Daily: 2}}},
		), t0)
		e.expect("heavy 1", db1, allowed("heavy"))
		e.expect("heavy 2", db1, denied("heavy", LimitDaily, ReasonDaily, 14*time.Hour))
		low := db1
		low.Severity = "low"
		e.expect("severity not matched", low, allowed("default"))
		e.expect("other diagnostic, own counter", Request{Host: db1.Host, Diagnostic: "disk-usage", Severity: "high"}, allowed("default"))
		e.expect("host not matched", Request{Host: web1.Host, Diagnostic: "full-dump", Severity: "high"}, allowed("default"))
		e.expect("default exhausted for db-01", low, denied("default", LimitDaily, ReasonDaily, 14*time.Hour))
	}},
	{"no rule matched", func(t *testing.T, h harness) {
		e := h.setup(t, rules(Rule{Name: "only-db", Match: Match{Host: "^db-"}, Limits: []Limit{{Daily: 1}}}), t0)
		for range 3 {
			d := e.expect("unmatched", web1, Decision{Allowed: true, Rule: RuleNone, Reason: ReasonNoRule})
			if d.Degraded {
				t.Fatal("unexpected degraded")
			}
		}
		if got := e.decisions(RuleNone, "allowed", ReasonNoRule); got != 3 {
			t.Fatalf(`decisions_total{rule="none"} = %v, want 3`, got)
		}
	}},
	{"key kinds", func(t *testing.T, h harness) {
		for _, tc := range []struct {
			key       string
			sameCount []Request // share one counter with web1
			ownCount  []Request // do not
		}{
			{KeyHost, []Request{{Host: web1.Host, Diagnostic: "other"}}, []Request{{Host: "x.example.com", Diagnostic: web1.Diagnostic}}},
			{KeyDiagnostic, []Request{{Host: "x.example.com", Diagnostic: web1.Diagnostic}}, []Request{{Host: web1.Host, Diagnostic: "other"}}},
			{KeyHostDiagnostic, nil, []Request{{Host: web1.Host, Diagnostic: "other"}, {Host: "x.example.com", Diagnostic: web1.Diagnostic}}},
			{KeyGlobal, []Request{{Host: "x.example.com", Diagnostic: "other"}}, nil},
		} {
			t.Run(tc.key, func(t *testing.T) {
				e := h.setup(t, rules(Rule{Name: "r", Key: tc.key, Limits: []Limit{{Daily: 1}}}), t0)
				e.expect("first", web1, allowed("r"))
				for _, r := range tc.sameCount {
					e.expect("shares the counter: "+r.Host+"/"+r.Diagnostic, r, denied("r", LimitDaily, ReasonDaily, 14*time.Hour))
				}
				for _, r := range tc.ownCount {
					e.expect("own counter: "+r.Host+"/"+r.Diagnostic, r, allowed("r"))
				}
			})
		}
	}},
	{"check consumes nothing", func(t *testing.T, h harness) {
		cfg := rules(Rule{Name: "default", Block: time.Hour, Limits: []Limit{
			{Daily: 1}, {MinInterval: time.Minute}, {Window: &Window{Count: 1, Per: time.Minute}}, {Rate: &Rate{Count: 1, Per: time.Second}},
		}})
		e := h.setup(t, cfg, t0)
		ev := web1
		ev.DedupeKey = "42"
		for range 3 {
			c := e.check(ev)
			if !c.Allowed || c.Counters.DailyUsed != 0 || c.Counters.WindowCount != 0 {
				t.Fatalf("check: %s", verdict(c))
			}
		}
		if e.client != nil {
			if keys := scanKeys(t, e.client, e.prefix+"*"); len(keys) != 0 {
				t.Fatalf("a check created keys: %v", keys)
			}
		}
		e.expect("allow after checks", ev, allowed("default"))
		other := web1
		e.expect("denied, sets the block", other, denied("default", LimitDaily, ReasonDaily, 14*time.Hour))
		c := e.check(other)
		if c.Limit != LimitBlock || c.Counters.DailyUsed != 1 {
			t.Fatalf("check after denial: %s", verdict(c))
		}
		if c := e.check(ev); !c.Duplicate {
			t.Fatalf("check of a seen event: %s, want duplicate", verdict(c))
		}
	}},
}

func runConformance(t *testing.T, h harness) {
	for _, c := range conformanceCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

func TestConformanceMemory(t *testing.T) { runConformance(t, memoryHarness()) }

func TestConformanceRedis(t *testing.T) { runConformance(t, redisHarness()) }

// TestConformanceRedisWindowZSet: every window in a sorted set of its own,
// as windows larger than the state key's log are.
func TestConformanceRedisWindowZSet(t *testing.T) {
	t.Parallel()
	runConformance(t, harness{name: "redis-zset", zset: true, client: func(t *testing.T) redis.UniversalClient { return testRedisDirect(t) }})
}

func TestConformanceRedisDirect(t *testing.T) {
	t.Parallel()
	runConformance(t, harness{name: "redis-direct", client: func(t *testing.T) redis.UniversalClient { return testRedisDirect(t) }})
}
