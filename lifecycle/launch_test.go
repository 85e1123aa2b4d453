package lifecycle

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// launchEnv is instance i-9 launched into group web (or its warm pool)
// with launching hook "ready", inside a synctest bubble.
func launchEnv(t *testing.T, hbt time.Duration, destination string) (*asgfake.Server, *Actor, *prometheus.Registry) {
	t.Helper()
	fake := asgfake.New(asgfake.Options{Seed: 9})
	fake.AddGroup("web")
	if err := fake.SetWarmPool("web", asgfake.WarmedRunning); err != nil {
		t.Fatal(err)
	}
	if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "ready", Transition: asgfake.TransitionLaunching,
		HeartbeatTimeout: hbt, DefaultResult: asgfake.ResultAbandon}); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.Launch("web", "i-9", destination); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.LaunchHookName = "ready"
	cfg.HeartbeatInterval = 23 * time.Second // no beat falls on a readiness round
	reg := prometheus.NewRegistry()
	actor := NewActor(cfg, Deps{AutoScaling: newASGClient(fake, nil), InstanceID: "i-9", Logger: testLogger(t), Registerer: reg})
	return fake, actor, reg
}

// readiness is a scripted set of checks: redis is up from upAt (zero =
// never), counted per round.
type readiness struct {
	start  time.Time
	upAt   time.Duration
	rounds atomic.Int32
	mu     sync.Mutex
	times  []time.Duration
}

func (r *readiness) check(context.Context) []Check {
	r.rounds.Add(1)
	e := time.Since(r.start)
	r.mu.Lock()
	r.times = append(r.times, e)
	r.mu.Unlock()
	redis := Check{Name: "redis", OK: r.upAt != 0 && e >= r.upAt}
	if !redis.OK {
		redis.Detail = "dial tcp 127.0.0.1:6379: connect: connection refused"
	}
	return []Check{{Name: "config", OK: true}, redis}
}

func TestLaunchGate(t *testing.T) {
	tests := []struct {
		name       string
		upAt       time.Duration // 0 = never, < 0 = from the start
		wantResult string
		wantAt     time.Duration // when the completion goes out
	}{
		{"ready at once", -1, ResultContinue, 0},
		{"redis back within launch_timeout", 2*time.Minute + time.Second, ResultContinue, 2*time.Minute + LaunchRecheck}, // rounds at 0, 3 s, …
		{"redis down past launch_timeout", 0, ResultAbandon, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake, actor, reg := launchEnv(t, 2*time.Minute, asgfake.PlaceGroup)
				r := &readiness{start: time.Now(), upAt: tt.upAt}
				start := time.Now()
				statusSeen := make(chan LaunchStatus, 1)
				time.AfterFunc(time.Minute, func() { statusSeen <- actor.LaunchStatus() })

				got, err := actor.LaunchGate(t.Context(), DestinationGroup, r.check)
				if err != nil || got != tt.wantResult {
					t.Fatalf("LaunchGate = %q, %v; want %s", got, err, tt.wantResult)
				}
				a, _ := fake.Action("i-9")
				if a.Completions != 1 || a.Result != tt.wantResult || a.EndReason != asgfake.EndCompleted {
					t.Fatalf("action = %+v; want completed once with %s", a, tt.wantResult)
				}
				if at := a.EndedAt.Sub(start); at != tt.wantAt {
					t.Fatalf("completed at +%s; want +%s", at, tt.wantAt)
				}
				// Heartbeats at once and every 23 s while waiting kept the
				// 2-minute hook alive (ready at once, the completion may
				// come before the first).
				if want := int(tt.wantAt/(23*time.Second)) + 1; a.Heartbeats != want && (tt.wantAt > 0 || a.Heartbeats > 1) {
					t.Fatalf("%d heartbeats; want %d", a.Heartbeats, want)
				}
				// Re-checked every LaunchRecheck while failing.
				if tt.wantAt > 0 {
					if want := int32(tt.wantAt/LaunchRecheck) + 1; r.rounds.Load() != want {
						t.Fatalf("%d readiness rounds; want %d (every %s)", r.rounds.Load(), want, LaunchRecheck)
					}
				}
				wantState := "InService"
				if tt.wantResult == ResultAbandon {
					wantState = "Terminating:Proceed"
				}
				if st := fake.InstanceState("i-9"); st != wantState {
					t.Fatalf("instance state = %q; want %q", st, wantState)
				}
				st := actor.LaunchStatus()
				if !st.Completed || st.Result != tt.wantResult || st.Hook != "ready" || st.Destination != DestinationGroup ||
					st.Ready != (tt.wantResult == ResultContinue) || len(st.Checks) != 2 || st.Deadline != start.Add(5*time.Minute) {
					t.Fatalf("LaunchStatus = %+v", st)
				}
				if tt.wantAt > time.Minute {
					// While waiting, the failing check is on show.
					mid := <-statusSeen
					if mid.Ready || mid.Completed || len(failing(mid.Checks)) != 1 || mid.Checks[1].Detail == "" {
						t.Fatalf("status while waiting = %+v; want not ready, redis failing with its reason", mid)
					}
				}
				// Exactly once: a second call sends nothing.
				calls := fake.Count("CompleteLifecycleAction", "")
				if again, err := actor.LaunchGate(t.Context(), DestinationGroup, r.check); err != nil || again != tt.wantResult {
					t.Fatalf("second LaunchGate = %q, %v", again, err)
				}
				if n := fake.Count("CompleteLifecycleAction", ""); n != calls {
					t.Fatalf("second LaunchGate called CompleteLifecycleAction again (%d → %d)", calls, n)
				}
				if n := counter(t, reg, "autodiag_lifecycle_completions_total", "result", "ok"); n != 1 {
					t.Fatalf("completions_total{ok} = %v; want 1", n)
				}
				// Heartbeats end with the gate.
				beats := a.Heartbeats
				time.Sleep(10 * time.Minute)
				if n := len(heartbeatTimes(fake, "ok")); n != beats {
					t.Fatalf("%d heartbeats after the gate returned; want still %d", n, beats)
				}
			})
		})
	}
}

// TestLaunchGateRetriesCompletion: throttled completions are retried (the
// heartbeats keep the action alive meanwhile) until one gets through.
func TestLaunchGateRetriesCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake, actor, _ := launchEnv(t, time.Minute, asgfake.PlaceGroup)
		fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling", Count: 8})
		got, err := actor.LaunchGate(t.Context(), DestinationGroup, func(context.Context) []Check { return []Check{{Name: "all", OK: true}} })
		if err != nil || got != ResultContinue {
			t.Fatalf("LaunchGate = %q, %v", got, err)
		}
		if n := fake.Count("CompleteLifecycleAction", "ok"); n != 1 {
			t.Fatalf("%d successful completions; want 1", n)
		}
		if a, _ := fake.Action("i-9"); a.EndReason != asgfake.EndCompleted || a.Result != ResultContinue {
			t.Fatalf("action = %+v; want completed (not timed out) with CONTINUE", a)
		}
	})
}

// TestLaunchGateWarmPool: the action into the warm pool and the one out of
// it are each completed once, by destination.
func TestLaunchGateWarmPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake, actor, _ := launchEnv(t, time.Minute, asgfake.PlaceWarmPool)
		ok := func(context.Context) []Check { return []Check{{Name: "all", OK: true}} }
		if got, err := actor.LaunchGate(t.Context(), DestinationWarmPool, ok); err != nil || got != ResultContinue {
			t.Fatalf("LaunchGate(WarmPool) = %q, %v", got, err)
		}
		if st := fake.InstanceState("i-9"); st != asgfake.WarmedRunning {
			t.Fatalf("state = %q; want %s", st, asgfake.WarmedRunning)
		}
		time.Sleep(time.Hour)
		if _, err := fake.LeaveWarmPool("i-9"); err != nil {
			t.Fatal(err)
		}
		if got, err := actor.LaunchGate(t.Context(), DestinationGroup, ok); err != nil || got != ResultContinue {
			t.Fatalf("LaunchGate(AutoScalingGroup) = %q, %v", got, err)
		}
		if st := fake.InstanceState("i-9"); st != "InService" {
			t.Fatalf("state = %q; want InService", st)
		}
		if n := fake.Count("CompleteLifecycleAction", "ok"); n != 2 {
			t.Fatalf("%d completions; want one per destination", n)
		}
	})
}

// TestLaunchGateCancelled: a gate stopped before a result is decided
// completes nothing.
func TestLaunchGateCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake, actor, _ := launchEnv(t, 2*time.Minute, asgfake.PlaceGroup)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		r := &readiness{start: time.Now()}
		if _, err := actor.LaunchGate(ctx, DestinationGroup, r.check); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("LaunchGate = %v; want the context's error", err)
		}
		if n := fake.Count("CompleteLifecycleAction", ""); n != 0 {
			t.Fatalf("%d completions; want none", n)
		}
	})
}

func TestLaunchGateWithoutHook(t *testing.T) {
	actor := NewActor(DefaultConfig(), Deps{})
	if _, err := actor.LaunchGate(t.Context(), DestinationGroup, nil); !errors.Is(err, ErrNoLaunchHook) {
		t.Fatalf("LaunchGate = %v; want ErrNoLaunchHook", err)
	}
}

// TestGateIntakeWarmPool: launched into a Warmed:Running pool, the agent
// completes the launch into the pool once ready but may not take work; when
// the instance leaves the pool it completes the second launch and intake
// may start within one poll interval of InService.
func TestGateIntakeWarmPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake, actor, _ := launchEnv(t, 5*time.Minute, asgfake.PlaceWarmPool)
		s := newIMDSStandIn()
		s.set(pathTargetLifecycleState, asgfake.WarmedRunning)
		cfg := actor.cfg
		cfg.Sources = []string{SourceSignal, SourceIMDS}
		cfg.HookName = "drain"
		cfg.ASGName = "web"
		w, err := NewWatcher(cfg, Deps{IMDS: standInClient(s), InstanceID: "i-9", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = w.Run(ctx, func(Trigger) {}) }()
		gated := make(chan time.Time, 1)
		var gateErr error
		go func() {
			gateErr = GateIntake(ctx, w, actor, func(context.Context) []Check { return []Check{{Name: "all", OK: true}} })
			gated <- time.Now()
		}()

		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case <-gated:
			t.Fatalf("GateIntake returned (%v) while warmed", gateErr)
		default:
		}
		if st := fake.InstanceState("i-9"); st != asgfake.WarmedRunning {
			t.Fatalf("instance state = %q; want %s (launch into the pool completed)", st, asgfake.WarmedRunning)
		}

		if _, err := fake.LeaveWarmPool("i-9"); err != nil {
			t.Fatal(err)
		}
		s.set(pathTargetLifecycleState, StateInService)
		left := time.Now()
		at := <-gated
		if gateErr != nil {
			t.Fatalf("GateIntake = %v", gateErr)
		}
		if lag := at.Sub(left); lag > cfg.IMDSPollInterval {
			t.Fatalf("intake allowed %s after InService; want within one poll interval (%s)", lag, cfg.IMDSPollInterval)
		}
		if st := fake.InstanceState("i-9"); st != "InService" {
			t.Fatalf("instance state = %q; want InService (second launch completed)", st)
		}
		if n := fake.Count("CompleteLifecycleAction", "ok"); n != 2 {
			t.Fatalf("%d completions; want 2 (into the pool, out of it)", n)
		}
	})
}

func TestGateIntakeAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake, actor, _ := launchEnv(t, 5*time.Minute, asgfake.PlaceGroup)
		err := GateIntake(t.Context(), nil, actor, func(context.Context) []Check { return []Check{{Name: "redis", Detail: "down"}} })
		if !errors.Is(err, ErrLaunchAbandoned) {
			t.Fatalf("GateIntake = %v; want ErrLaunchAbandoned", err)
		}
		if a, _ := fake.Action("i-9"); a.Result != ResultAbandon {
			t.Fatalf("action = %+v; want abandoned", a)
		}
	})
}
