package lifecycle

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// settleEnv is an instance in Terminating:Wait whose action the API shows
// only visibleAfter after it began, and an Actor that learned of it from
// IMDS at once (no token, Started = now).
func settleEnv(t *testing.T, visibleAfter time.Duration, hook bool) (*asgfake.Server, *Actor, *prometheus.Registry, Action) {
	t.Helper()
	fake := asgfake.New(asgfake.Options{Seed: 5, VisibleAfter: visibleAfter})
	fake.AddGroup("web")
	if err := fake.AddInstance("web", "i-1"); err != nil {
		t.Fatal(err)
	}
	if hook {
		if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: 5 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	} else if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", Transition: asgfake.TransitionLaunching}); err != nil {
		t.Fatal(err) // the hook exists, but terminating the instance starts no action of it
	}
	if _, err := fake.Terminate("i-1"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	actor := NewActor(testConfig(30*time.Second, 5*time.Minute), Deps{AutoScaling: newASGClient(fake, nil), InstanceID: "i-1",
		Logger: testLogger(t), Registerer: reg})
	return fake, actor, reg, Action{InstanceID: "i-1", ASGName: "web", HookName: "drain", Started: time.Now()}
}

// TestCompleteWaitsForActionToBecomeVisible: "No active Lifecycle Action
// found" right after an imds trigger, then the action appearing 5 s later,
// gives exactly one successful completion.
func TestCompleteWaitsForActionToBecomeVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const visibleAfter = 5 * time.Second
		fake, actor, reg, act := settleEnv(t, visibleAfter, true)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), DefaultCompleteTimeout)
		defer cancel()
		if err := actor.Complete(ctx, act, ResultContinue); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		a, _ := fake.Action("i-1")
		if a.Completions != 1 || a.EndReason != asgfake.EndCompleted || a.Result != ResultContinue {
			t.Fatalf("action = %+v; want completed once with CONTINUE", a)
		}
		if ok := fake.Count("CompleteLifecycleAction", "ok"); ok != 1 {
			t.Fatalf("%d successful completions; want exactly 1", ok)
		}
		if n := counter(t, reg, "autodiag_lifecycle_completions_total", "result", "no_action"); n == 0 {
			t.Fatal("no no_action attempt counted: the test did not exercise the invisible action")
		}
		// Done within one backoff step (≤ 10 s) of the action appearing.
		if took := a.EndedAt.Sub(start); took < visibleAfter || took > visibleAfter+10*time.Second {
			t.Fatalf("completed %s after the trigger; want soon after %s", took, visibleAfter)
		}
		if st := actor.Status(); !st.Completed || st.NoActiveAction {
			t.Fatalf("status = %+v; want completed, not no_action", st)
		}
	})
}

// TestCompleteNoActionAfterSettle: an action that never appears counts as
// done NoActionSettle after the first "no active" answer, not before.
func TestCompleteNoActionAfterSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, actor, reg, act := settleEnv(t, 0, false)
		start := time.Now()
		if err := actor.Complete(t.Context(), act, ResultContinue); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		if took := time.Since(start); took != NoActionSettle {
			t.Fatalf("gave up after %s; want exactly %s (the last try when the window closes)", took, NoActionSettle)
		}
		if st := actor.Status(); !st.Completed || !st.NoActiveAction {
			t.Fatalf("status = %+v; want completed as no_action", st)
		}
		if n := counter(t, reg, "autodiag_lifecycle_completions_total", "result", "no_action"); n < 3 {
			t.Fatalf("%v no_action attempts; want retries with backoff", n)
		}
	})
}

// TestCompleteLateTriggerTrustsNoAction: past NoActionSettle after the
// trigger, or for an action known by its token, "no active" is final at once.
func TestCompleteLateTriggerTrustsNoAction(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Action)
	}{
		{"imds action seen long ago", func(a *Action) { a.Started = a.Started.Add(-NoActionSettle) }},
		{"token", func(a *Action) { a.Token = "tok" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, actor, reg, act := settleEnv(t, 0, false)
				tt.edit(&act)
				start := time.Now()
				if err := actor.Complete(t.Context(), act, ResultContinue); err != nil {
					t.Fatalf("Complete = %v", err)
				}
				if took := time.Since(start); took != 0 {
					t.Fatalf("took %s; want at once", took)
				}
				if n := counter(t, reg, "autodiag_lifecycle_completions_total", "result", "no_action"); n != 1 {
					t.Fatalf("%v attempts; want 1", n)
				}
			})
		})
	}
}

// TestHeartbeatWaitsForActionToBecomeVisible: heartbeats do not stop on a
// "no active" answer right after an imds trigger; they keep the action
// alive once it appears.
func TestHeartbeatWaitsForActionToBecomeVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const visibleAfter = 5 * time.Second
		fake, actor, _, act := settleEnv(t, visibleAfter, true)
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- actor.Heartbeat(ctx, act) }()
		time.Sleep(10 * time.Minute) // twice the hook's heartbeat timeout
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Heartbeat = %v", err)
		}
		ok := heartbeatTimes(fake, "ok")
		if len(ok) == 0 || ok[0].Sub(start) < visibleAfter || ok[0].Sub(start) > visibleAfter+5*time.Second {
			t.Fatalf("successful heartbeats at %v; want the first soon after %s", ok, visibleAfter)
		}
		if a, _ := fake.Action("i-1"); a.Ended {
			t.Fatalf("action = %+v; want kept alive past its heartbeat timeout", a)
		}
		if st := actor.Status(); st.NoActiveAction {
			t.Fatalf("status = %+v; want no no_active_action", st)
		}
	})
}
