package worker

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/limiter"
)

// renewals records the renewals of a task's lease and of its limiter hold.
type renewals struct {
	state.LeaseStore // only Renew is called
	mu               sync.Mutex
	lease, limits    []time.Time
}

func (r *renewals) Renew(context.Context, string, string, time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lease = append(r.lease, time.Now())
	return nil
}

func (r *renewals) Allow(context.Context, limiter.Request) (limiter.Decision, error) {
	return limiter.Decision{}, nil
}

func (r *renewals) Done(context.Context, limiter.Request, string) error { return nil }

func (r *renewals) Fold(limiter.Request) (*limiter.Folded, bool) { return nil, false }

func (r *renewals) DoneCalls(limiter.Request, string) ([]limiter.ScriptCall, bool) { return nil, false }

// limiterRenewals is the Decider side of renewals.
type limiterRenewals struct{ *renewals }

func (r limiterRenewals) Renew(context.Context, limiter.Request, time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limits = append(r.limits, time.Now())
	return nil
}

// TestKeepAliveRenewsEveryThirdOfTheLease: while a task runs, its lease
// and its limiter hold are renewed every third of the lease; once stopped,
// or once the run's context has ended, never again.
func TestKeepAliveRenewsEveryThirdOfTheLease(t *testing.T) {
	for _, stopBy := range []string{"stop", "context"} {
		t.Run(stopBy, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := &renewals{}
				l := &leases{store: r, limiter: limiterRenewals{r}, lease: time.Minute, storeTimeout: time.Second,
					log: slog.New(slog.DiscardHandler), calls: &storeCalls{timeout: time.Second}}
				j := &job{leased: true, limitReq: &limiter.Request{}}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				start := time.Now()
				stop := l.keepAlive(ctx, j)
				time.Sleep(70 * time.Second) // fake time: renewals at 20 s, 40 s, 60 s
				synctest.Wait()
				if stopBy == "stop" {
					stop()
				} else {
					cancel()
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				stop()
				r.mu.Lock()
				defer r.mu.Unlock()
				want := []time.Duration{20 * time.Second, 40 * time.Second, time.Minute}
				for name, got := range map[string][]time.Time{"lease": r.lease, "limiter": r.limits} {
					if len(got) != len(want) {
						t.Fatalf("%s renewed %d times, want %d", name, len(got), len(want))
					}
					for i, at := range got {
						if at.Sub(start) != want[i] {
							t.Errorf("%s renewal %d at %v, want %v", name, i, at.Sub(start), want[i])
						}
					}
				}
			})
		})
	}
}

// BenchmarkKeepAlive is what keeping a task's lease alive costs a task
// that ends before its first renewal, as nearly all do (renewals come
// every lease / 3): start, then stop. It runs once per task
// (BenchmarkSQSIntake, agent-redis).
func BenchmarkKeepAlive(b *testing.B) {
	l := &leases{lease: time.Minute, storeTimeout: time.Second}
	j := &job{leased: true}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		stop := l.keepAlive(ctx, j)
		stop()
	}
}
