package limiter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// registry stands in for the agents' instance registry: the in-service
// sorted sets of limiter.InServiceKey, scored by heartbeat expiry (ms).
type registry struct {
	t      *testing.T
	c      redis.Cmdable
	prefix string
	clock  *clock.Manual
}

// beat puts agents ids[from:to] in service in scope (per, value), their
// heartbeat lasting ttl from now.
func (r registry) beat(per, value string, from, to int, ttl time.Duration) {
	r.t.Helper()
	for i := from; i < to; i++ {
		z := redis.Z{Score: float64(r.clock.Now().Add(ttl).UnixMilli()), Member: fmt.Sprintf("i-%08x", i)}
		if err := r.c.ZAdd(r.t.Context(), InServiceKey(r.prefix, per, value), z).Err(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// leave takes agents ids[from:to] out of service (their drain began).
func (r registry) leave(per, value string, from, to int) {
	r.t.Helper()
	for i := from; i < to; i++ {
		if err := r.c.ZRem(r.t.Context(), InServiceKey(r.prefix, per, value), fmt.Sprintf("i-%08x", i)).Err(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// percentClients are the transports a max_percent cap runs on: a single
// server, where allow.lua counts the agents itself (one call), and a Ring,
// which routes by key like a Cluster, where the count is one ZCOUNT ahead.
func percentClients(t *testing.T) map[string]redis.UniversalClient {
	addr := requireEnv(t, "AUTODIAG_TEST_REDIS_ADDR")
	c := testRedisDirect(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	return map[string]redis.UniversalClient{"single server": c, "ring": ring}
}

// TestConcurrencyPercentFleet: `concurrency: {max_percent: 10}` lets
// max(1, floor(10 % of the agents in service)) runs at once, recounted at
// every decision as agents join, leave, and stop heartbeating; a denial
// says concurrency_percent with the running count, the cap, the agents
// and the share.
func TestConcurrencyPercentFleet(t *testing.T) {
	for name, c := range percentClients(t) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			prefix := uniquePrefix(t)
			reg := registry{t: t, c: c, prefix: prefix, clock: clk}
			b := NewRedis(c, prefix)
			l, err := New(rules(Rule{Name: "pct", Key: KeyDiagnostic,
				Limits: []Limit{{Concurrency: Concurrency{MaxPercent: 10}}}}), b, Options{Clock: clk, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			decisions := 0
			allow := func(id string) Decision {
				t.Helper()
				decisions++
				d, err := l.Allow(t.Context(), Request{Host: "web-1", Diagnostic: "df", TaskID: id, Lease: 10 * time.Minute})
				if err != nil || d.Degraded {
					t.Fatalf("allow %s: %v (degraded %v)", id, err, d.Degraded)
				}
				return d
			}
			want := func(d Decision, allowed bool, running, limit, agents int) {
				t.Helper()
				c := d.Counters
				if d.Allowed != allowed || c.Running != running || c.ConcurrencyLimit != limit || c.AgentsInService != agents || c.MaxPercent != 10 {
					t.Fatalf("decision %+v; want allowed=%v running=%d limit=%d agents=%d max_percent=10", d, allowed, running, limit, agents)
				}
				if !allowed && (d.Reason != ReasonConcurrencyPercent || d.Limit != LimitConcurrency) {
					t.Fatalf("denied with %s/%s; want %s/%s", d.Limit, d.Reason, LimitConcurrency, ReasonConcurrencyPercent)
				}
			}
			const hb = 30 * time.Second

			want(allow("t0"), true, 1, 1, 0) // no agent registered: still one run
			reg.beat(PerFleet, "", 0, 5, hb)
			want(allow("t1"), false, 1, 1, 5) // 10 % of 5, at least 1
			reg.beat(PerFleet, "", 5, 20, hb)
			want(allow("t1"), true, 2, 2, 20) // 15 joined: 2
			want(allow("t2"), false, 2, 2, 20)
			reg.beat(PerFleet, "", 20, 30, 3*hb) // 10 more, with a longer heartbeat
			want(allow("t2"), true, 3, 3, 30)
			want(allow("t3"), false, 3, 3, 30)
			reg.leave(PerFleet, "", 25, 30) // 5 begin to drain
			want(allow("t3"), false, 3, 2, 25)
			clk.Add(hb) // agents 0-19 stop heartbeating: 5 left
			want(allow("t3"), false, 3, 1, 5)
			if d := allow("t1"); !d.Allowed { // a held slot stays held as the cap falls
				t.Fatalf("t1 again: %+v; want allowed (it holds its slot)", d)
			}
			for _, id := range []string{"t0", "t1", "t2"} {
				if err := l.Done(t.Context(), Request{Host: "web-1", Diagnostic: "df", TaskID: id}, OutcomeSucceeded); err != nil {
					t.Fatal(err)
				}
			}
			want(allow("t3"), true, 1, 1, 5)
			if name == "single server" {
				if got := b.calls.Load(); got != int64(decisions) {
					t.Fatalf("%d allow.lua calls for %d decisions; want one each", got, decisions)
				}
			}
		})
	}
}

// TestConcurrencyPercentPerZone: per az, each zone's runs are capped by
// its own agents in service, in slots of their own: zone a (10 agents)
// runs 1 while zone b (20 agents) runs 2.
func TestConcurrencyPercentPerZone(t *testing.T) {
	for name, c := range percentClients(t) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			prefix := uniquePrefix(t)
			reg := registry{t: t, c: c, prefix: prefix, clock: clk}
			cfg := rules(Rule{Name: "pct", Key: KeyDiagnostic,
				Limits: []Limit{{Concurrency: Concurrency{MaxPercent: 10, Per: PerAZ}}}})
			zone := map[string]*Limiter{}
			for _, az := range []string{"a", "b"} {
				l, err := New(cfg, NewRedis(c, prefix), Options{Clock: clk, Timeout: time.Minute, AZ: az})
				if err != nil {
					t.Fatal(err)
				}
				zone[az] = l
			}
			reg.beat(PerAZ, "a", 0, 10, time.Minute)
			reg.beat(PerAZ, "b", 10, 30, time.Minute)
			var got []string
			for _, step := range []struct{ az, id string }{{"a", "a1"}, {"b", "b1"}, {"a", "a2"}, {"b", "b2"}, {"b", "b3"}} {
				d, err := zone[step.az].Allow(t.Context(), Request{Host: "h", Diagnostic: "df", TaskID: step.id, Lease: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%s:%v:%d/%d of %d", step.id, d.Allowed, d.Counters.Running, d.Counters.ConcurrencyLimit, d.Counters.AgentsInService))
			}
			want := "a1:true:1/1 of 10 b1:true:1/2 of 20 a2:false:1/1 of 10 b2:true:2/2 of 20 b3:false:2/2 of 20"
			if s := strings.Join(got, " "); s != want {
				t.Fatalf("decisions\n got %s\nwant %s", s, want)
			}
			if keys := scanKeys(t, testRedisDirect(t), prefix+"lim:{df}:c:pct:az:*"); len(keys) != 2 { // the ring has one server
				t.Fatalf("slot keys %v; want one per zone", keys)
			}
		})
	}
}

// TestConcurrencyPercentExplained: limits explain states the share, its
// scope and the denial reason.
func TestConcurrencyPercentExplained(t *testing.T) {
	l, err := New(rules(Rule{Name: "pct", Key: KeyDiagnostic,
		Limits: []Limit{{Concurrency: Concurrency{MaxPercent: 12.5, Per: PerASG}}}}), NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteExplain(&b, l.Explain(t0)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"12.5% of this agent's Auto Scaling group's agents in service at once", "concurrency_percent"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, b.String())
		}
	}
}
