package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/lifecycle"
)

const (
	endingASG      = "asg-ending"
	endingHook     = "drain-hook"
	endingInstance = "i-0123456789abcdef0"
)

// endingCase is one way a drain begins, and how it must end.
type endingCase struct {
	name string
	// persisted, when set, is a drain the previous process left behind.
	persisted *state.DrainRecord
	// trigger starts the drain once Run serves; nil = the persisted one.
	trigger func(a *Agent, act *lifecycle.Action)
	// fault makes CompleteLifecycleAction answer with this error code.
	fault   string
	wantEnd supervisor.Ending
	wantErr error
	// completed: the fake's action ends completed by the agent.
	completed bool
}

// TestRunEndingBySource: how Run ends for each drain source, which main
// maps to the exit status: a drain that ends a lifecycle action (completed
// or no longer active), a spot notice, a rebalance recommendation, a
// maintenance event or a signal is done; an admin drain or a resumed drain
// without an action leaves the instance running; a completion that fails
// is an error.
func TestRunEndingBySource(t *testing.T) {
	t.Parallel()
	drainBy := func(source string) func(*Agent, *lifecycle.Action) {
		return func(a *Agent, _ *lifecycle.Action) { a.Drain(source, "test") }
	}
	withAction := func(source string) func(*Agent, *lifecycle.Action) {
		return func(a *Agent, act *lifecycle.Action) {
			a.sup.Start(drain.Trigger{Source: source, Reason: "test"}, act)
		}
	}
	staleAction := func(a *Agent, act *lifecycle.Action) {
		gone := *act
		gone.Token = "00000000-0000-0000-0000-000000000000"
		a.sup.Start(drain.Trigger{Source: lifecycle.SourceSQS, Reason: "test"}, &gone)
	}
	cases := []endingCase{
		{name: "signal", trigger: drainBy(lifecycle.SourceSignal), wantEnd: supervisor.EndingDone},
		{name: "spot", trigger: drainBy(lifecycle.TriggerSpot), wantEnd: supervisor.EndingDone},
		{name: "admin", trigger: drainBy("admin"), wantEnd: supervisor.EndingDrained},
		{name: "rebalance", trigger: drainBy(lifecycle.TriggerRebalance), wantEnd: supervisor.EndingDone},
		{name: "maintenance", trigger: drainBy(lifecycle.TriggerMaintenance), wantEnd: supervisor.EndingDone},
		{name: "sqs action completed", trigger: withAction(lifecycle.SourceSQS), wantEnd: supervisor.EndingDone, completed: true},
		{name: "imds action completed", trigger: withAction(lifecycle.SourceIMDS), wantEnd: supervisor.EndingDone, completed: true},
		{name: "admin drain that ended an action", trigger: withAction("admin"), wantEnd: supervisor.EndingDone, completed: true},
		{name: "action no longer active", trigger: staleAction, wantEnd: supervisor.EndingDone},
		{name: "completion refused", trigger: withAction(lifecycle.SourceSQS), fault: "AccessDenied",
			wantEnd: supervisor.EndingDone, wantErr: supervisor.ErrCompletionFailed},
		{name: "resumed without action", persisted: &state.DrainRecord{Source: "admin", Reason: "POST /v1/drain"},
			wantEnd: supervisor.EndingDrained},
		{name: "resumed with action", persisted: &state.DrainRecord{Source: lifecycle.SourceSQS, Reason: "notice"},
			wantEnd: supervisor.EndingDone, completed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			end, err := runEndingCase(t, tc)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Run = %v, want %v", err, tc.wantErr)
			}
			if end != tc.wantEnd {
				t.Fatalf("Ending = %s, want %s", end, tc.wantEnd)
			}
		})
	}
}

// runEndingCase runs an embedded agent with an Auto Scaling fake behind its
// Actor until the case's drain ends.
func runEndingCase(t *testing.T, tc endingCase) (supervisor.Ending, error) {
	t.Helper()
	fake := asgfake.New(asgfake.Options{Seed: 1})
	fake.AddGroup(endingASG)
	if err := fake.AddInstance(endingASG, endingInstance); err != nil {
		t.Fatal(err)
	}
	if err := fake.PutHook(asgfake.Hook{Group: endingASG, Name: endingHook, HeartbeatTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	acts, err := fake.Terminate(endingInstance)
	if err != nil || len(acts) != 1 {
		t.Fatalf("Terminate = %v, %v", acts, err)
	}
	if tc.fault != "" {
		fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: tc.fault})
	}
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	client := autoscaling.NewFromConfig(sqsfake.SDKConfig(ts.URL), func(o *autoscaling.Options) {
		o.Retryer = retry.AddWithMaxAttempts(o.Retryer, 1)
	})
	action := &lifecycle.Action{InstanceID: endingInstance, ASGName: endingASG, HookName: endingHook, Token: acts[0].Token}

	cfg, err := config.Load([]byte(testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Lifecycle.HookName = endingHook
	cfg.Lifecycle.ASGName = endingASG
	cfg.Lifecycle.HeartbeatInterval = time.Minute
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: endingInstance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	// Open builds no Actor for a signal-only config; this one talks to the fake.
	a.sup = a.newSupervisor(a.d.Watcher, lifecycle.NewActor(cfg.Lifecycle, lifecycle.Deps{AutoScaling: client, InstanceID: endingInstance}))

	if tc.persisted != nil {
		rec := *tc.persisted
		rec.StartedAt = time.Now().Add(-time.Minute)
		rec.Deadline = rec.StartedAt.Add(2 * time.Minute) // testConfig's drain_timeout
		if tc.wantEnd == supervisor.EndingDone {
			rec.Action, _ = json.Marshal(action)
		}
		if err := a.d.Store.SaveDrain(context.Background(), endingInstance, rec); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	<-a.Started()
	if tc.trigger != nil {
		tc.trigger(a, action)
	}
	select {
	case err = <-done:
	case <-time.After(supervisor.CompletionTimeout + supervisor.ReleaseGrace):
		t.Fatal("Run did not return")
	}
	if act, _ := fake.Action(endingInstance); tc.completed != (act.EndReason == asgfake.EndCompleted) {
		t.Errorf("the fake's action ended %q; completed by the agent: %v", act.EndReason, tc.completed)
	}
	return a.Ending(), err
}
