package limiter

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// fakeBackend fails (or answers allowed) and counts its calls.
type fakeBackend struct {
	mu    sync.Mutex
	calls int
	err   error
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) eval(ctx context.Context, o *op, _ time.Duration) (result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return result{}, f.err
	}
	res := result{rules: make([]ruleResult, len(o.rules))}
	for i := range res.rules {
		res.rules[i] = ruleResult{status: statusAllowed, since: -1}
	}
	return res, nil
}

func (f *fakeBackend) held(context.Context, *heldOp, time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.err
}

func (f *fakeBackend) inspect(context.Context, string, *ruleOp, int64, time.Duration) (ruleState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return ruleState{}, f.err
}

func (f *fakeBackend) set(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeBackend) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func failCfg() Config {
	return rules(
		Rule{Name: "strict", Match: Match{Host: "^db-"}, Fail: FailClosed, OnExceed: OnExceedDefer, Limits: []Limit{{Daily: 2}}},
		Rule{Name: "default", Limits: []Limit{{Daily: 2}}},
	)
}

func TestUnreachableRedisFailMode(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	l, err := New(failCfg(), NewRedis(c, "autodiag:"), Options{Registerer: reg, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  Request
		want Decision
	}{
		{"rule fail open (inherited)", web1, Decision{Allowed: true, Rule: "default", Reason: ReasonDegradedOpen, OnExceed: OnExceedDrop, Degraded: true}},
		{"rule fail closed", db1, Decision{Rule: "strict", Reason: ReasonDegradedClosed, OnExceed: OnExceedDefer, Degraded: true, RetryAfter: 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := l.Allow(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("Allow: %v (a backend failure must not be an error)", err)
			}
			if d.Allowed != tc.want.Allowed || d.Rule != tc.want.Rule || d.Reason != tc.want.Reason ||
				d.Degraded != tc.want.Degraded || d.OnExceed != tc.want.OnExceed || d.RetryAfter != tc.want.RetryAfter {
				t.Fatalf("got %+v, want %+v", d, tc.want)
			}
		})
	}
	if got := testutil.ToFloat64(l.metrics.degraded); got != 2 {
		t.Fatalf("autodiag_limiter_degraded_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(l.metrics.decisions.WithLabelValues("strict", "denied", ReasonDegradedClosed)); got != 1 {
		t.Fatalf("decisions{strict,denied,degraded_closed} = %v, want 1", got)
	}
	if _, err := l.Check(context.Background(), web1); err == nil {
		t.Fatal("Check against an unreachable Redis: nil error, want the cause")
	}
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	fb := &fakeBackend{err: errors.New("connection refused")}
	clock := clock.NewManual(t0)
	reg := prometheus.NewRegistry()
	l, err := New(failCfg(), fb, Options{Clock: clock, Registerer: reg, BreakerThreshold: 5, BreakerCooldown: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	allow := func(step string, wantReason string, wantCalls int) {
		t.Helper()
		d, err := l.Allow(context.Background(), web1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason != wantReason || fb.count() != wantCalls {
			t.Fatalf("%s: reason %s after %d backend calls, want %s after %d", step, d.Reason, fb.count(), wantReason, wantCalls)
		}
	}
	for i := 1; i <= 5; i++ {
		allow("failure", ReasonDegradedOpen, i)
	}
	for range 3 {
		allow("breaker open: backend not called", ReasonBreakerOpen, 5)
	}
	clock.Add(5*time.Second - time.Microsecond)
	allow("still cooling down", ReasonBreakerOpen, 5)
	clock.Add(time.Microsecond)
	allow("probe fails", ReasonDegradedOpen, 6)
	allow("reopened", ReasonBreakerOpen, 6)
	clock.Add(5 * time.Second)
	fb.set(nil)
	allow("probe succeeds", ReasonAllowed, 7)
	allow("closed again", ReasonAllowed, 8)
	if got := testutil.ToFloat64(l.metrics.degraded); got != 11 {
		t.Fatalf("degraded_total = %v, want 11", got)
	}
	if got := testutil.ToFloat64(l.metrics.decisions.WithLabelValues("default", "allowed", ReasonBreakerOpen)); got != 5 {
		t.Fatalf("decisions{breaker_open} = %v, want 5", got)
	}
}

func TestBreakerSingleProbe(t *testing.T) {
	t.Parallel()
	var b breaker
	b.threshold, b.cooldown = 1, time.Second
	b.failure(t0)
	if b.allow(t0) {
		t.Fatal("open breaker allowed a call")
	}
	now := t0.Add(time.Second)
	if !b.allow(now) {
		t.Fatal("no probe after the cooldown")
	}
	if b.allow(now) {
		t.Fatal("a second probe while the first is in flight")
	}
	b.abort()
	if !b.allow(now) {
		t.Fatal("no probe after an aborted one")
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	l, err := New(failCfg(), NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, web1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Allow with a cancelled ctx: %v, want context.Canceled", err)
	}
	if _, err := l.Check(ctx, web1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Check with a cancelled ctx: %v, want context.Canceled", err)
	}
}

// TestRuleWithoutLimitsNeedsNoBackend: a rule with no limits, block or
// dedupe allows without a backend call, so it never degrades.
func TestRuleWithoutLimitsNeedsNoBackend(t *testing.T) {
	t.Parallel()
	fb := &fakeBackend{err: errors.New("down")}
	cfg := rules(Rule{Name: "free", Fail: FailClosed})
	l, err := New(cfg, fb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(context.Background(), web1)
	if err != nil || !d.Allowed || d.Degraded || d.Rule != "free" || fb.count() != 0 {
		t.Fatalf("got %+v %v after %d backend calls, want allowed by rule free without calls", d, err, fb.count())
	}
	ev := web1
	ev.DedupeKey = "1"
	if d, _ := l.Allow(context.Background(), ev); !d.Degraded || d.Allowed || fb.count() != 1 {
		t.Fatalf("with a dedupe key: %+v after %d calls, want a degraded closed decision after 1", d, fb.count())
	}
}

// TestTimeoutBoundsCall: a Redis that accepts connections but never answers
// is cut off by Options.Timeout (the client's own timeouts are an hour), and
// the decision degrades: on a goroutine of its own when the client ignores
// context deadlines, on the caller's with ContextTimeoutEnabled, including a
// decision that waits for the only pooled connection, held by another.
func TestTimeoutBoundsCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		ctxTimeout bool
		poolBusy   bool // another call holds the only connection for an hour
		wantDirect bool
	}{
		{"own goroutine", false, false, false},
		{"context deadline", true, false, true},
		{"context deadline, waiting for the pool", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redis.NewClient(&redis.Options{Addr: silentAddr(t), MaxRetries: -1, PoolSize: 1,
				ContextTimeoutEnabled: tc.ctxTimeout,
				DialTimeout:           time.Hour, ReadTimeout: time.Hour, WriteTimeout: time.Hour, PoolTimeout: time.Hour})
			t.Cleanup(func() { _ = c.Close() })
			b := NewRedis(c, "autodiag:")
			if direct := b.waiter.Direct(); direct != tc.wantDirect {
				t.Fatalf("direct call = %v, want %v", direct, tc.wantDirect)
			}
			l, err := New(failCfg(), b, Options{Timeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if tc.poolBusy {
				go func() { _ = c.Get(context.Background(), "held").Err() }() // ends with c.Close
				for deadline := time.Now().Add(10 * time.Second); ; {
					if st := c.PoolStats(); st.TotalConns == 1 && st.IdleConns == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the holding call never took the connection: %+v", c.PoolStats())
					}
					runtime.Gosched()
				}
			}
			type answer struct {
				d   Decision
				err error
			}
			done := make(chan answer, 1)
			go func() {
				d, err := l.Allow(context.Background(), db1)
				done <- answer{d, err}
			}()
			select {
			case a := <-done:
				if a.err != nil || !a.d.Degraded || a.d.Allowed || a.d.Reason != ReasonDegradedClosed {
					t.Fatalf("got %+v %v, want a degraded closed decision", a.d, a.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Allow still waiting on a silent Redis: Options.Timeout did not bound the call")
			}
		})
	}
}

// silentAddr is a listener that accepts connections and never answers.
func silentAddr(t *testing.T) string {
	ln, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	return ln.Addr().String()
}
