package lifecycle

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// actorEnv runs inside a synctest bubble: the fake service, the SDK client
// and the Actor all see the bubble's fake time.
type actorEnv struct {
	fake  *asgfake.Server
	actor *Actor
	reg   *prometheus.Registry
	sqs   *fakeSQS
	act   Action
	cfg   Config
}

func newActorEnv(t *testing.T, cfg Config, hbt time.Duration, retryer func() *retry.Standard) *actorEnv {
	t.Helper()
	fake := asgfake.New(asgfake.Options{Seed: 7})
	fake.AddGroup("web")
	if err := fake.AddInstance("web", "i-1"); err != nil {
		t.Fatal(err)
	}
	if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: hbt, DefaultResult: asgfake.ResultAbandon}); err != nil {
		t.Fatal(err)
	}
	acts, err := fake.Terminate("i-1")
	if err != nil {
		t.Fatal(err)
	}
	var client = newASGClient(fake, nil)
	if retryer != nil {
		client = newASGClient(fake, retryer())
	}
	reg := prometheus.NewRegistry()
	q := newFakeSQS()
	e := &actorEnv{fake: fake, reg: reg, sqs: q, cfg: cfg,
		act: Action{InstanceID: "i-1", ASGName: "web", HookName: "drain", Token: acts[0].Token, Started: time.Now()}}
	e.actor = NewActor(cfg, Deps{AutoScaling: client, SQS: q, InstanceID: "i-1", Logger: testLogger(t), Registerer: reg})
	return e
}

func testConfig(interval, hbt time.Duration) Config {
	cfg := DefaultConfig()
	cfg.HeartbeatInterval = interval
	cfg.HookHeartbeatTimeout = hbt
	return cfg
}

// drain heartbeats for d of fake time, then cancels and waits for Heartbeat.
func (e *actorEnv) drain(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.actor.Heartbeat(ctx, e.act) }()
	time.Sleep(d) // fake time: advances once every goroutine is blocked
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Heartbeat returned %v after cancel; want nil", err)
	}
}

func heartbeatTimes(fake *asgfake.Server, result string) []time.Time {
	var out []time.Time
	for _, c := range fake.Calls() {
		if c.Op == "RecordLifecycleActionHeartbeat" && c.Result == result {
			out = append(out, c.At)
		}
	}
	return out
}

func TestHeartbeatAtIntervalThenCompleteOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(30*time.Second, 90*time.Second)
		e := newActorEnv(t, cfg, 90*time.Second, nil)
		start := time.Now()
		e.drain(t, 10*time.Minute+time.Second)

		got := heartbeatTimes(e.fake, "ok")
		if len(got) != 21 {
			t.Fatalf("%d heartbeats in 10m at 30s; want 21 (one at once, then every 30s)", len(got))
		}
		for i, at := range got {
			if want := start.Add(time.Duration(i) * 30 * time.Second); !at.Equal(want) {
				t.Fatalf("heartbeat %d at +%s; want +%s", i, at.Sub(start), want.Sub(start))
			}
		}
		time.Sleep(time.Minute) // heartbeats stopped with the drain
		if n := len(heartbeatTimes(e.fake, "ok")); n != 21 {
			t.Fatalf("%d heartbeats after the drain ended; want still 21", n)
		}
		if a, _ := e.fake.Action("i-1"); a.Ended {
			t.Fatalf("action ended while heartbeating: %+v", a)
		}

		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		if err := e.actor.Complete(ctx, e.act, ResultContinue); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if err := e.actor.Complete(ctx, e.act, ResultContinue); err != nil {
			t.Fatalf("second Complete: %v", err)
		}
		if n := e.fake.Count("CompleteLifecycleAction", ""); n != 1 {
			t.Fatalf("CompleteLifecycleAction called %d times; want 1 (second Complete is a no-op)", n)
		}
		a, _ := e.fake.Action("i-1")
		if !a.Ended || a.EndReason != asgfake.EndCompleted || a.Result != ResultContinue {
			t.Fatalf("action = %+v; want completed with CONTINUE", a)
		}
		if v := counter(t, e.reg, "autodiag_lifecycle_heartbeats_total", "result", "ok"); v != 21 {
			t.Fatalf("heartbeats_total{ok} = %v; want 21", v)
		}
		if v := counter(t, e.reg, "autodiag_lifecycle_completions_total", "result", "ok"); v != 1 {
			t.Fatalf("completions_total{ok} = %v; want 1", v)
		}
		st := e.actor.Status()
		if st.Heartbeats != 21 || !st.Completed || st.Result != ResultContinue || st.Hook != "drain" {
			t.Fatalf("status = %+v", st)
		}
	})
}

func TestThrottlingHalfTheCalls(t *testing.T) {
	tests := []struct {
		name    string
		retryer func() *retry.Standard
	}{
		{"actor backoff only", nil},
		{"SDK standard retryer too", func() *retry.Standard { return retry.NewStandard() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig(30*time.Second, 90*time.Second)
				e := newActorEnv(t, cfg, 90*time.Second, tt.retryer)
				e.fake.InjectFault(asgfake.Fault{Op: "RecordLifecycleActionHeartbeat", Code: "Throttling", Probability: 0.5})
				e.fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling", Probability: 0.5})
				e.drain(t, 2*time.Hour)
				if a, _ := e.fake.Action("i-1"); a.Ended {
					t.Fatalf("action expired while heartbeating under 50%% throttling: %+v", a)
				}
				if n := len(heartbeatTimes(e.fake, "Throttling")); n < 20 {
					t.Fatalf("only %d throttled heartbeats; the fault did not bite", n)
				}
				ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 2*time.Minute)
				defer cancel()
				if err := e.actor.Complete(ctx, e.act, ResultContinue); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if n := e.fake.Count("CompleteLifecycleAction", "ok"); n != 1 {
					t.Fatalf("%d successful completions; want exactly 1", n)
				}
				if v := counter(t, e.reg, "autodiag_lifecycle_heartbeats_total", "result", "throttled"); v == 0 && tt.retryer == nil {
					t.Fatalf("heartbeats_total{throttled} = 0; want the throttled attempts counted")
				}
			})
		})
	}
}

func TestCompleteNoActiveActionCountsAsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newActorEnv(t, testConfig(30*time.Second, 60*time.Second), 60*time.Second, nil)
		time.Sleep(2 * time.Minute) // no heartbeats: the action times out
		if err := e.actor.Complete(t.Context(), e.act, ResultContinue); err != nil {
			t.Fatalf("Complete after expiry = %v; want nil (no active action counts as done)", err)
		}
		if v := counter(t, e.reg, "autodiag_lifecycle_completions_total", "result", "no_action"); v != 1 {
			t.Fatalf("completions_total{no_action} = %v; want 1", v)
		}
		if st := e.actor.Status(); !st.Completed || !st.NoActiveAction {
			t.Fatalf("status = %+v; want completed with no active action", st)
		}
		if a, _ := e.fake.Action("i-1"); a.EndReason != asgfake.EndHeartbeatTimeout || a.Result != asgfake.ResultAbandon {
			t.Fatalf("action = %+v; want ended by heartbeat timeout with the hook's DefaultResult", a)
		}
	})
}

func TestCompleteAfterLostResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newActorEnv(t, testConfig(30*time.Second, 90*time.Second), 90*time.Second, nil)
		e.fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "InternalFailure", Count: 1, AfterApply: true})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := e.actor.Complete(ctx, e.act, ResultAbandon); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		a, _ := e.fake.Action("i-1")
		if a.Completions != 1 || a.Result != ResultAbandon {
			t.Fatalf("action = %+v; want completed once with ABANDON", a)
		}
		if v := counter(t, e.reg, "autodiag_lifecycle_completions_total", "result", "error"); v != 1 {
			t.Fatalf("completions_total{error} = %v; want 1 (the lost response)", v)
		}
		if v := counter(t, e.reg, "autodiag_lifecycle_completions_total", "result", "no_action"); v != 1 {
			t.Fatalf("completions_total{no_action} = %v; want 1 (the retry)", v)
		}
	})
}

func TestCompleteResults(t *testing.T) {
	tests := []struct {
		name    string
		result  string
		wantErr bool
	}{
		{"continue", ResultContinue, false},
		{"abandon passed through", ResultAbandon, false},
		{"invalid", "continue", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newActorEnv(t, testConfig(30*time.Second, 90*time.Second), 90*time.Second, nil)
				err := e.actor.Complete(t.Context(), e.act, tt.result)
				if (err != nil) != tt.wantErr {
					t.Fatalf("Complete(%q) = %v; want error %v", tt.result, err, tt.wantErr)
				}
				a, _ := e.fake.Action("i-1")
				if tt.wantErr {
					if a.Ended || e.fake.Count("CompleteLifecycleAction", "") != 0 {
						t.Fatalf("invalid result reached the service: %+v", a)
					}
					return
				}
				if a.Result != tt.result || a.Completions != 1 {
					t.Fatalf("action = %+v; want completed with %s", a, tt.result)
				}
			})
		})
	}
}

func TestCompleteIsBoundedWithoutDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newActorEnv(t, testConfig(30*time.Second, 90*time.Second), 90*time.Second, nil)
		e.fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "ServiceUnavailable"})
		start := time.Now()
		err := e.actor.Complete(context.Background(), e.act, ResultContinue)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Complete against a dead service = %v; want a deadline error", err)
		}
		if took := time.Since(start); took < DefaultCompleteTimeout || took > DefaultCompleteTimeout+time.Minute {
			t.Fatalf("gave up after %s of fake time; want about DefaultCompleteTimeout (%s)", took, DefaultCompleteTimeout)
		}
		if n := e.fake.Count("CompleteLifecycleAction", "ServiceUnavailable"); n < 5 {
			t.Fatalf("only %d attempts; want retries with backoff", n)
		}
		// A later call with a healthy service completes: failures are not cached.
		e.fake.ClearFaults()
		if err := e.actor.Complete(context.Background(), e.act, ResultContinue); err != nil {
			t.Fatalf("Complete after recovery: %v", err)
		}
	})
}

// TestCompleteKeepsActionAliveWhileRetrying: CompleteLifecycleAction is
// throttled for 150 s against a hook whose heartbeat timeout is 60 s. The
// drain's heartbeats have stopped, so without heartbeats from the retry
// loop the action would lapse into its default result (ABANDON here).
func TestCompleteKeepsActionAliveWhileRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newActorEnv(t, testConfig(20*time.Second, 60*time.Second), 60*time.Second, nil)
		e.drain(t, 5*time.Second) // one heartbeat at the start, then the drain ends
		e.fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling"})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- e.actor.Complete(ctx, e.act, ResultContinue) }()
		time.Sleep(150 * time.Second)
		e.fake.ClearFaults()
		if err := <-done; err != nil {
			t.Fatalf("Complete: %v", err)
		}
		a, _ := e.fake.Action("i-1")
		if !a.Ended || a.EndReason != asgfake.EndCompleted || a.Result != ResultContinue {
			t.Fatalf("action = %+v; want completed CONTINUE, not lapsed", a)
		}
		if st := e.actor.Status(); !st.Completed || st.NoActiveAction || st.Result != ResultContinue {
			t.Errorf("status = %+v; want completed CONTINUE", st)
		}
		// Heartbeats during the retries, each at most 20 s plus one retry
		// wait (10 s backoff cap, +50 % jitter) after the previous one.
		beats := heartbeatTimes(e.fake, "ok")
		const maxGap = 20*time.Second + 15*time.Second
		if kept := len(beats) - 1; kept < int(150*time.Second/maxGap) {
			t.Fatalf("%d heartbeats during 150 s of retries; want at least %d", kept, int(150*time.Second/maxGap))
		}
		for i := 1; i < len(beats); i++ {
			if gap := beats[i].Sub(beats[i-1]); gap > maxGap {
				t.Errorf("heartbeat gap %s at %s; want at most %s", gap, beats[i].Sub(start), maxGap)
			}
		}
		if n := counter(t, e.reg, "autodiag_lifecycle_heartbeats_total", "result", "ok"); n != float64(len(beats)) {
			t.Errorf("heartbeats counted %v; want %d", n, len(beats))
		}
	})
}

func TestHeartbeatStopsWhenActionGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newActorEnv(t, testConfig(30*time.Second, 90*time.Second), 90*time.Second, nil)
		done := make(chan error, 1)
		go func() { done <- e.actor.Heartbeat(t.Context(), e.act) }()
		time.Sleep(5*time.Minute + time.Second)
		// Someone else completes the action (an operator, another process).
		_, err := newASGClient(e.fake, nil).CompleteLifecycleAction(t.Context(), &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String("drain"),
			InstanceId: aws.String("i-1"), LifecycleActionResult: aws.String(ResultContinue)})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Heartbeat = %v; want nil", err)
			}
		case <-time.After(time.Hour):
			t.Fatal("Heartbeat still running an hour after the action ended")
		}
		if n := len(heartbeatTimes(e.fake, "ValidationError")); n != 1 {
			t.Fatalf("%d heartbeats refused; want 1 then stop", n)
		}
		if st := e.actor.Status(); !st.NoActiveAction || st.Heartbeats != 11 {
			t.Fatalf("status = %+v; want 11 heartbeats then no active action", st)
		}
		if v := counter(t, e.reg, "autodiag_lifecycle_heartbeats_total", "result", "no_action"); v != 1 {
			t.Fatalf("heartbeats_total{no_action} = %v; want 1", v)
		}
	})
}

func TestHeartbeatStopsAtGlobalTimeout(t *testing.T) {
	tests := []struct {
		name      string
		configHBT time.Duration // 0: learned with DescribeLifecycleHooks
	}{
		{"configured hook timeout", 30 * time.Second},
		{"learned hook timeout", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig(10*time.Second, tt.configHBT) // global timeout 3000s
				e := newActorEnv(t, cfg, 30*time.Second, nil)
				done := make(chan error, 1)
				go func() { done <- e.actor.Heartbeat(t.Context(), e.act) }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("Heartbeat = %v; want nil", err)
					}
				case <-time.After(2 * time.Hour):
					t.Fatal("Heartbeat still running past the global timeout")
				}
				times := heartbeatTimes(e.fake, "ok")
				last := times[len(times)-1]
				if limit := e.act.Started.Add(3000 * time.Second); !last.Before(limit) || len(times) != 300 {
					t.Fatalf("%d heartbeats, last at +%s; want 300, all before the global timeout", len(times), last.Sub(e.act.Started))
				}
			})
		})
	}
}

func TestHeartbeatIntervalTooLongForHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Configured 2m, the hook's timeout is 60s and not configured: the
		// Actor learns it and beats every 20s instead of letting it expire.
		e := newActorEnv(t, testConfig(2*time.Minute, 0), 60*time.Second, nil)
		start := time.Now()
		e.drain(t, 10*time.Minute-time.Second) // beats at 0, 20s, ... 9m40s
		if a, _ := e.fake.Action("i-1"); a.Ended {
			t.Fatalf("action expired: %+v", a)
		}
		times := heartbeatTimes(e.fake, "ok")
		if len(times) != 30 || !times[1].Equal(start.Add(20*time.Second)) {
			t.Fatalf("%d heartbeats, second at +%s; want 30 at 20s spacing", len(times), times[1].Sub(start))
		}
		if n := e.fake.Count("DescribeLifecycleHooks", "ok"); n != 1 {
			t.Fatalf("DescribeLifecycleHooks called %d times; want once", n)
		}
	})
}

func TestResolveASG(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(30*time.Second, 90*time.Second)
		e := newActorEnv(t, cfg, 90*time.Second, nil)
		e.fake.InjectFault(asgfake.Fault{Op: "DescribeAutoScalingInstances", Code: "Throttling", Count: 2})
		act := Action{InstanceID: "i-1", HookName: "drain"}
		if err := e.actor.ResolveASG(t.Context(), &act); err != nil || act.ASGName != "web" {
			t.Fatalf("ResolveASG = %v, ASG %q; want web", err, act.ASGName)
		}
		// Cached: no more calls.
		act2 := Action{InstanceID: "i-1", HookName: "drain"}
		if err := e.actor.ResolveASG(t.Context(), &act2); err != nil || act2.ASGName != "web" {
			t.Fatalf("second ResolveASG = %v, %q", err, act2.ASGName)
		}
		if n := e.fake.Count("DescribeAutoScalingInstances", ""); n != 3 {
			t.Fatalf("DescribeAutoScalingInstances called %d times; want 3 (2 throttled + 1)", n)
		}
		unknown := Action{InstanceID: "i-404", HookName: "drain"}
		other := NewActor(cfg, Deps{AutoScaling: newASGClient(e.fake, nil)})
		if err := other.ResolveASG(t.Context(), &unknown); err == nil {
			t.Fatal("ResolveASG of an instance outside any group succeeded")
		}
		// The IMDS-only action (no token) heartbeats and completes by instance id.
		if err := e.actor.Complete(t.Context(), act, ResultContinue); err != nil {
			t.Fatal(err)
		}
		calls := e.fake.Calls()
		c := calls[len(calls)-1]
		if c.Op != "CompleteLifecycleAction" || c.Params.Get("InstanceId") != "i-1" || c.Params.Has("LifecycleActionToken") {
			t.Fatalf("completion call = %+v; want by InstanceId without token", c)
		}
	})
}

func TestNotificationKeptHiddenThenDeletedAfterCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newActorEnv(t, testConfig(30*time.Second, 90*time.Second), 90*time.Second, nil)
		e.sqs.send("ours", "{}")
		out, _ := e.sqs.ReceiveMessage(t.Context(), &sqsReceive)
		e.act.NotificationQueueURL = "https://sqs.test/q"
		e.act.NotificationReceipt = *out.Messages[0].ReceiptHandle
		e.drain(t, 5*time.Minute)
		ext := e.sqs.callsFor("ChangeMessageVisibility", "ours#")
		if len(ext) < 10 || ext[0].visibility < 60 {
			t.Fatalf("visibility extensions = %+v; want one per heartbeat, each ≥ 60s", ext)
		}
		if m := e.sqs.msg("ours"); m.deleted || m.receives != 1 {
			t.Fatalf("message = %+v; want hidden, received once, not deleted while draining", m)
		}
		if err := e.actor.Complete(t.Context(), e.act, ResultContinue); err != nil {
			t.Fatal(err)
		}
		dels := e.sqs.callsFor("DeleteMessage", "ours#")
		if len(dels) != 1 || !e.sqs.msg("ours").deleted {
			t.Fatalf("deletes = %+v; want our notification deleted once after completion", dels)
		}
		var completedAt time.Time
		for _, c := range e.fake.Calls() {
			if c.Op == "CompleteLifecycleAction" && c.Result == "ok" {
				completedAt = c.At
			}
		}
		if dels[0].at.Before(completedAt) {
			t.Fatal("notification deleted before the completion")
		}
	})
}
