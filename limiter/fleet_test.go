package limiter

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// TestFleetExactness: 8 clients (each its own limiter and, for Redis, its
// own connection pool, like 8 agents) make 1000 concurrent decisions against
// daily: 2; exactly 2 are allowed. With ContextTimeoutEnabled each client
// decides on 25 goroutines at once, each call under its own deadline.
func TestFleetExactness(t *testing.T) {
	t.Parallel()
	const clients, decisions = 8, 1000
	for _, tc := range []struct {
		name    string
		perCli  int // goroutines per client
		backend func(t *testing.T, prefix string) func() Backend
	}{
		{"memory", 1, func(t *testing.T, _ string) func() Backend {
			m := NewMemory()
			return func() Backend { return m }
		}},
		{"redis", 1, func(t *testing.T, prefix string) func() Backend {
			addr := requireEnv(t, "AUTODIAG_TEST_REDIS_ADDR")
			return func() Backend {
				c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4})
				t.Cleanup(func() { _ = c.Close() })
				return NewRedis(c, prefix)
			}
		}},
		{"redis direct, concurrent", 25, func(t *testing.T, prefix string) func() Backend {
			addr := requireEnv(t, "AUTODIAG_TEST_REDIS_ADDR")
			return func() Backend {
				c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				return NewRedis(c, prefix)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newBackend := tc.backend(t, uniquePrefix(t))
			cfg := rules(Rule{Name: "default", Limits: []Limit{{Daily: 2}}})
			var allowedN, deniedN atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range clients {
				// Exactness, not the timeout, is under test: a bound far
				// above a loaded machine's queueing keeps any decision
				// from degrading.
				l, err := New(cfg, newBackend(), Options{Clock: clock.NewManual(t0), Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				n := decisions / clients / tc.perCli
				for range tc.perCli {
					wg.Go(func() {
						<-start
						for range n {
							d, err := l.Allow(context.Background(), web1)
							switch {
							case err != nil || d.Degraded:
								t.Errorf("client %d: %+v %v", i, d, err)
								return
							case d.Allowed:
								allowedN.Add(1)
							default:
								deniedN.Add(1)
							}
						}
					})
				}
			}
			close(start)
			wg.Wait()
			if allowedN.Load() != 2 || deniedN.Load() != decisions-2 {
				t.Fatalf("allowed %d, denied %d; want exactly 2 allowed of %d", allowedN.Load(), deniedN.Load(), decisions)
			}
		})
	}
}

// TestKeysStayUnderPrefix: every key the limiter creates for a request lives
// under its prefix, carries a TTL, and a dry run creates none.
func TestKeysStayUnderPrefix(t *testing.T) {
	t.Parallel()
	c := testRedis(t)
	prefix := uniquePrefix(t)
	token := randHex(6)
	host := "web-" + token + ".example.com"
	cfg := rules(Rule{Name: "all", Block: 0, Key: KeyHostDiagnostic, Limits: []Limit{
		{Daily: 3}, {MinInterval: time.Hour}, {Window: &Window{Count: 5, Per: time.Minute}}, {Rate: &Rate{Count: 5, Per: time.Hour}},
	}})
	cfg.Rules = append(cfg.Rules, Rule{Name: "blocky", Match: Match{Diagnostic: []string{"b"}}, Block: time.Minute, Limits: []Limit{{Daily: 1}}})
	l, err := New(cfg, NewRedis(c, prefix), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := Request{Host: host, Diagnostic: "disk-usage", DedupeKey: "ev-" + token}
	for range 3 {
		if _, err := l.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if keys := scanKeys(t, c, "*"+token+"*"); len(keys) != 0 {
		t.Fatalf("dry runs created keys: %v", keys)
	}
	for _, r := range []Request{req, req, {Host: host, Diagnostic: "b"}, {Host: host, Diagnostic: "b"}} {
		if _, err := l.Allow(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	keys := scanKeys(t, c, "*"+token+"*")
	if len(keys) != 3 { // dedupe mark; state of rule all; state of rule blocky (its block)
		t.Fatalf("expected the decision keys, found %v", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix+"lim:{") {
			t.Errorf("key %q outside prefix %q", k, prefix)
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %q has no TTL (%v)", k, ttl)
		}
	}
}

// TestScriptReload: after SCRIPT FLUSH (a restarted or failed-over Redis)
// the backend falls back to EVAL and keeps deciding correctly.
func TestScriptReload(t *testing.T) {
	t.Parallel()
	c := testRedis(t)
	l, err := New(rules(Rule{Name: "default", Limits: []Limit{{Daily: 1}}}), NewRedis(c, uniquePrefix(t)), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		d, err := l.Allow(ctx, web1)
		if err != nil || d.Degraded || d.Allowed != want {
			t.Fatalf("decision %d after SCRIPT FLUSH: %+v %v, want allowed=%v", i, d, err, want)
		}
	}
	if ok := c.ScriptExists(ctx, allowScript.Hash()).Val(); len(ok) != 1 || !ok[0] {
		t.Fatalf("allow.lua not cached after the fallback: %v", ok)
	}
}

// TestWindowClockSkew: agents whose clocks disagree share one sliding
// window; it stays a log sorted by time, so trimming and retry_after use the
// oldest run, not the first one written; in the state's log and in a sorted
// set.
func TestWindowClockSkew(t *testing.T) {
	t.Parallel()
	forEachWindowKind(t, testWindowClockSkew)
}

// forEachWindowKind runs test with windows kept as a log in the state key,
// and as sorted sets.
func forEachWindowKind(t *testing.T, test func(t *testing.T, zset bool)) {
	for _, zset := range []bool{false, true} {
		t.Run(fmt.Sprintf("zset=%v", zset), func(t *testing.T) {
			test(t, zset)
		})
	}
}

// newRedisWindows is NewRedis keeping every window in a sorted set when
// zset is set.
func newRedisWindows(c redis.Scripter, prefix string, zset bool) *Redis {
	b := NewRedis(c, prefix)
	if zset {
		b.logMax = 0
	}
	return b
}

func testWindowClockSkew(t *testing.T, zset bool) {
	c := testRedisDirect(t)
	prefix := uniquePrefix(t)
	cfg := rules(Rule{Name: "default", Limits: []Limit{{Window: &Window{Count: 3, Per: time.Minute}}}})
	ahead, behind := clock.NewManual(t0.Add(10*time.Second)), clock.NewManual(t0)
	la, err := New(cfg, newRedisWindows(c, prefix, zset), Options{Clock: ahead})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := New(cfg, newRedisWindows(c, prefix, zset), Options{Clock: behind})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name  string
		l     *Limiter
		clock *clock.Manual
		at    time.Duration // from t0
		want  Decision
		count int
	}{
		{"ahead at +10s", la, ahead, 10 * time.Second, allowed("default"), 1},
		{"behind at 0s", lb, behind, 0, allowed("default"), 2},
		{"ahead at +20s", la, ahead, 20 * time.Second, allowed("default"), 3},
		{"ahead at +30s: full, the oldest (0s) leaves at +60s", la, ahead, 30 * time.Second,
			denied("default", LimitWindow, ReasonWindow, 30*time.Second), 3},
		{"ahead at +60s: 0s left", la, ahead, time.Minute, allowed("default"), 3},
		{"behind at +25s: full, the oldest (10s) leaves at +70s", lb, behind, 25 * time.Second,
			denied("default", LimitWindow, ReasonWindow, 45*time.Second), 3},
	} {
		step.clock.Set(t0.Add(step.at))
		d, err := step.l.Allow(context.Background(), web1)
		if err != nil || d.Degraded || d.Allowed != step.want.Allowed || d.Limit != step.want.Limit ||
			d.RetryAfter != step.want.RetryAfter || d.Counters.WindowCount != step.count {
			t.Fatalf("%s: %s %v, want %s with %d in the window", step.name, verdict(d), err, verdict(step.want), step.count)
		}
	}
}

// TestWindowNeverKeepsMoreThanCount: after the window's count is lowered
// (agents with an older configuration wrote more runs), the next write keeps
// only the newest count runs.
func TestWindowNeverKeepsMoreThanCount(t *testing.T) {
	t.Parallel()
	forEachWindowKind(t, testWindowNeverKeepsMoreThanCount)
}

func testWindowNeverKeepsMoreThanCount(t *testing.T, zset bool) {
	c := testRedisDirect(t)
	prefix := uniquePrefix(t)
	clock := clock.NewManual(t0)
	rule := func(count int) Config {
		return rules(Rule{Name: "default", Block: time.Second, Limits: []Limit{{Window: &Window{Count: count, Per: time.Hour}}}})
	}
	before, err := New(rule(5), newRedisWindows(c, prefix, zset), Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	after, err := New(rule(2), newRedisWindows(c, prefix, zset), Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runs := func() int {
		if zset {
			return int(c.ZCard(ctx, prefix+"lim:{"+web1.Host+"}:w:default").Val())
		}
		return (len(c.Get(ctx, prefix+"lim:{"+web1.Host+"}:s:default").Val()) - 40) / 8
	}
	for i := range 5 {
		clock.Add(time.Second)
		if d, err := before.Allow(ctx, web1); err != nil || !d.Allowed {
			t.Fatalf("run %d under count 5: %s %v", i, verdict(d), err)
		}
	}
	if n := runs(); n != 5 {
		t.Fatalf("%d runs kept, want 5", n)
	}
	clock.Add(time.Second)
	if d, err := after.Allow(ctx, web1); err != nil || d.Allowed || d.Limit != LimitWindow || d.Counters.WindowCount != 5 {
		t.Fatalf("under count 2: %s %v, want a window denial seeing 5", verdict(d), err)
	}
	if n := runs(); n != 2 {
		t.Fatalf("%d runs kept after the denial, want the newest 2", n)
	}
}

// TestFleetConcurrency: 4 agents (each its own limiter and connection pool)
// with 2 workers each run 200 tasks for one host under concurrency: 1. A
// denied task goes back to the queue (defer); an allowed one marks its start
// and end and ends with Done. At no instant do two run, and all 200 run.
func TestFleetConcurrency(t *testing.T) {
	t.Parallel()
	const agents, workers, tasks = 4, 2, 200
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T, prefix string) func() Backend
	}{
		{"memory", func(t *testing.T, _ string) func() Backend {
			m := NewMemory()
			return func() Backend { return m }
		}},
		{"redis", func(t *testing.T, prefix string) func() Backend {
			addr := requireEnv(t, "AUTODIAG_TEST_REDIS_ADDR")
			return func() Backend {
				c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				return NewRedis(c, prefix)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newBackend := tc.backend(t, uniquePrefix(t))
			cfg := rules(Rule{Name: "heavy", Limits: []Limit{{Concurrency: Concurrency{Max: 1}}}})
			queue := make(chan string, tasks)
			for i := range tasks {
				queue <- fmt.Sprintf("task-%03d", i)
			}
			var running, maxRunning, ran, deferred atomic.Int64
			finished := make(chan struct{})
			var wg sync.WaitGroup
			for range agents {
				l, err := New(cfg, newBackend(), Options{Clock: clock.NewManual(t0), Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				for range workers {
					wg.Go(func() {
						for {
							var id string
							select {
							case id = <-queue:
							case <-finished:
								return
							}
							r := task(db1, id, time.Minute)
							d, err := l.Allow(context.Background(), r)
							if err != nil || d.Degraded {
								t.Errorf("%s: %+v %v", id, d, err)
								return
							}
							if !d.Allowed {
								if d.OnExceed != OnExceedDefer || d.Reason != ReasonConcurrency {
									t.Errorf("%s: %s on_exceed %s", id, verdict(d), d.OnExceed)
									return
								}
								deferred.Add(1)
								queue <- id
								continue
							}
							n := running.Add(1) // start mark
							for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
							}
							for range 20 { // the run: let the other workers try meanwhile
								runtime.Gosched()
							}
							running.Add(-1) // end mark
							if err := l.Done(context.Background(), r, OutcomeSucceeded); err != nil {
								t.Errorf("%s: Done: %v", id, err)
								return
							}
							if ran.Add(1) == tasks {
								close(finished)
							}
						}
					})
				}
			}
			wg.Wait()
			if ran.Load() != tasks || maxRunning.Load() != 1 {
				t.Fatalf("ran %d of %d, at most %d at once (want 1); %d deferrals", ran.Load(), tasks, maxRunning.Load(), deferred.Load())
			}
		})
	}
}
