package lifecycle

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/testenv"
)

// mockInstanceID is the instance-id served by amazon-ec2-metadata-mock.
const mockInstanceID = "i-1234567890abcdef0"

func TestIMDSSourceAgainstMetadataMock(t *testing.T) {
	t.Run("asglifecycle imdsv2", func(t *testing.T) {
		const delay = 3 * time.Second
		url, started := testenv.StartMetadataMock(t, "asglifecycle", "--imdsv2", "--asg-termination-delay-sec", strconv.Itoa(int(delay/time.Second)))

		m := newMockLab(t, url, asgfake.Options{})
		w, fake, reg := m.watcher, m.fake, m.reg
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		act, err := w.Probe(ctx)
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
		// The mock counts its delay in whole seconds from a truncated start
		// time: Terminated can appear up to a second early.
		early := delay - time.Second
		if time.Since(started) < early && act != nil {
			t.Fatalf("Probe = %+v while the mock still says InService", act)
		}

		var fired []Trigger
		if err := w.Run(ctx, func(tr Trigger) { fired = append(fired, tr) }); err != nil {
			t.Fatal(err)
		}
		if len(fired) != 1 {
			t.Fatalf("fired %d triggers in 30s; want 1 (Terminated after %s)", len(fired), delay)
		}
		tr := fired[0]
		if tr.Source != SourceIMDS || tr.Action == nil || !tr.Deadline.IsZero() {
			t.Fatalf("trigger = %+v; want imds with an action and no deadline of its own", tr)
		}
		if tr.At.Sub(started) < early {
			t.Fatalf("fired %s after the mock started; Terminated only appears after %s", tr.At.Sub(started), early)
		}
		want := Action{InstanceID: mockInstanceID, ASGName: "web", HookName: "drain", Started: tr.Action.Started}
		if *tr.Action != want {
			t.Fatalf("action = %+v; want %+v (ASG from DescribeAutoScalingInstances)", *tr.Action, want)
		}
		// spot/instance-action answers 404 in this mode: normal, not an error.
		if n := counter(t, reg, "autodiag_lifecycle_source_errors_total", "source", "imds"); n != 0 {
			t.Fatalf("%v imds poll errors; want 0 (404 and InService are normal answers)", n)
		}
		if act, err := w.Probe(ctx); err != nil || act == nil || act.HookName != "drain" {
			t.Fatalf("Probe after Terminated = %+v, %v; want the action", act, err)
		}

		// The IMDS action (no token) completes by instance id.
		if _, err := fake.Terminate(mockInstanceID); err != nil {
			t.Fatal(err)
		}
		actor := NewActor(m.cfg, m.deps)
		if err := actor.Complete(ctx, *tr.Action, ResultContinue); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if a, _ := fake.Action(mockInstanceID); a.Completions != 1 {
			t.Fatalf("fake action = %+v; want completed once", a)
		}
	})

	t.Run("spot", func(t *testing.T) {
		url, started := testenv.StartMetadataMock(t, "spot", "-d", "2")
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceIMDS}
		cfg.HookName = "drain"
		cfg.ASGName = "web"
		cfg.IMDSPollInterval = 100 * time.Millisecond
		w, err := NewWatcher(cfg, Deps{IMDS: imds.New(imds.Options{Endpoint: url, ClientEnableState: imds.ClientEnabled}), InstanceID: mockInstanceID, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var fired []Trigger
		if err := w.Run(ctx, func(tr Trigger) { fired = append(fired, tr) }); err != nil {
			t.Fatal(err)
		}
		if len(fired) != 1 {
			t.Fatalf("fired %d triggers in 30s; want the spot notice", len(fired))
		}
		tr := fired[0]
		if tr.Source != "spot" || tr.Action != nil || tr.At.Sub(started) < time.Second {
			// 2s delay, counted in whole seconds by the mock: at least 1s.
			t.Fatalf("trigger = %+v (%s after start); want spot without action, after the 2s delay", tr, tr.At.Sub(started))
		}
		// The mock announces the interruption 2 minutes ahead.
		want := tr.At.Add(2*time.Minute - SpotSafetyMargin)
		if diff := tr.Deadline.Sub(want); diff < -5*time.Second || diff > 5*time.Second {
			t.Fatalf("deadline = %s; want the action time minus %s ≈ %s", tr.Deadline, SpotSafetyMargin, want)
		}
	})
}

// countingIMDS counts the polls of each path going through to the mock.
type countingIMDS struct {
	imdsAPI
	mu    sync.Mutex
	polls map[string]int
}

func (c *countingIMDS) GetMetadata(ctx context.Context, in *imds.GetMetadataInput, optFns ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	c.mu.Lock()
	c.polls[in.Path]++
	c.mu.Unlock()
	return c.imdsAPI.GetMetadata(ctx, in, optFns...)
}

func (c *countingIMDS) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.polls[path]
}

// TestDrainEventsAgainstMetadataMock: a rebalance recommendation and an
// active instance-stop event, as ec2-metadata-mock serves them, each start
// a drain when listed in drain_on and are ignored when not.
func TestDrainEventsAgainstMetadataMock(t *testing.T) {
	tests := []struct {
		name       string
		args       []string // the mock's; the spot notice is pushed past the test
		path       string   // where the mock serves the event
		drainOn    []string
		wantSource string // "" = ignored
	}{
		{"rebalance configured", []string{"spot", "-d", "3600", "--rebalance-delay-sec", "0"}, pathRebalance,
			[]string{DrainOnSpot, DrainOnRebalance}, sourceRebalance},
		{"rebalance ignored", []string{"spot", "-d", "3600", "--rebalance-delay-sec", "0"}, pathRebalance,
			[]string{DrainOnSpot, DrainOnScheduled}, ""},
		{"instance-stop configured", []string{"events", "-o", "instance-stop", "-t", "active"}, pathScheduledEvents,
			[]string{DrainOnScheduled}, sourceScheduledEvent},
		{"instance-stop ignored", []string{"events", "-o", "instance-stop", "-t", "active"}, pathScheduledEvents,
			[]string{DrainOnSpot, DrainOnRebalance}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := testenv.StartMetadataMock(t, append(tt.args, "--imdsv2")...)
			client := imds.New(imds.Options{Endpoint: url, ClientEnableState: imds.ClientEnabled})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			// The mock serves the event: what the watcher does with it is
			// the agent's choice, not an absence.
			out, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: tt.path})
			if err != nil {
				t.Fatalf("mock does not serve %s: %v", tt.path, err)
			}
			out.Content.Close()

			cfg := DefaultConfig()
			cfg.Sources = []string{SourceSignal, SourceIMDS}
			cfg.HookName = "drain"
			cfg.ASGName = "web"
			cfg.DrainOn = tt.drainOn
			cfg.IMDSPollInterval = 50 * time.Millisecond
			reg := prometheus.NewRegistry()
			c := &countingIMDS{imdsAPI: client, polls: map[string]int{}}
			w, err := NewWatcher(cfg, Deps{IMDS: c, InstanceID: mockInstanceID, Logger: testLogger(t), Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			const polls = 5
			if tt.wantSource == "" {
				// Ignored: polls go on, and the event's path is not even read.
				go func() {
					tick := time.NewTicker(cfg.IMDSPollInterval)
					defer tick.Stop()
					for c.count(pathTargetLifecycleState) < polls && ctx.Err() == nil {
						<-tick.C
					}
					cancel()
				}()
			}
			var fired []Trigger
			if err := w.Run(ctx, func(tr Trigger) { fired = append(fired, tr) }); err != nil {
				t.Fatal(err)
			}
			if tt.wantSource == "" {
				if len(fired) != 0 || c.count(pathTargetLifecycleState) < polls || c.count(tt.path) != 0 {
					t.Fatalf("fired %+v after %d polls, %d reads of %s; want nothing fired, %s never read",
						fired, c.count(pathTargetLifecycleState), c.count(tt.path), tt.path, tt.path)
				}
				return
			}
			if len(fired) != 1 {
				t.Fatalf("fired %d triggers within 30s; want 1", len(fired))
			}
			tr := fired[0]
			if tr.Source != tt.wantSource || tr.Action != nil || tr.Reason == "" {
				t.Fatalf("trigger = %+v; want source %s without a lifecycle action, with a reason", tr, tt.wantSource)
			}
			// The mock's instance-stop NotBefore is its start time: already
			// past, so no deadline of its own (drain_timeout applies).
			if !tr.Deadline.IsZero() {
				t.Fatalf("deadline = %s; want none", tr.Deadline)
			}
			if n := counter(t, reg, "autodiag_lifecycle_source_errors_total", "source", "imds"); n != 0 {
				t.Fatalf("%v imds poll errors; want 0 (the mock's answers parse)", n)
			}
		})
	}
}

// TestCompletionAfterLaggingAPIAgainstMetadataMock: the mock says
// Terminated, but Auto Scaling shows the action only 5 s later; the
// completion right after the trigger is answered "No active Lifecycle
// Action found" and retried until exactly one succeeds.
func TestCompletionAfterLaggingAPIAgainstMetadataMock(t *testing.T) {
	url, _ := testenv.StartMetadataMock(t, "asglifecycle", "--imdsv2", "--asg-termination-delay-sec", "0")
	const lag = 5 * time.Second
	m := newMockLab(t, url, asgfake.Options{VisibleAfter: lag})
	w, fake, reg := m.watcher, m.fake, m.reg
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var tr *Trigger
	if err := w.Run(ctx, func(got Trigger) { tr = &got }); err != nil || tr == nil || tr.Action == nil {
		t.Fatalf("Run = %v, trigger %+v; want the imds trigger with its action", err, tr)
	}
	// Auto Scaling starts the action as IMDS shows it.
	if _, err := fake.Terminate(mockInstanceID); err != nil {
		t.Fatal(err)
	}
	actor := NewActor(m.cfg, m.deps)
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCompleteTimeout)
	defer ccancel()
	if err := actor.Complete(cctx, *tr.Action, ResultContinue); err != nil {
		t.Fatalf("Complete = %v", err)
	}
	if n := fake.Count("CompleteLifecycleAction", "ok"); n != 1 {
		t.Fatalf("%d successful completions; want exactly 1", n)
	}
	if n := counter(t, reg, "autodiag_lifecycle_completions_total", "result", "no_action"); n == 0 {
		t.Fatal("no no_action answer: the lag was not exercised")
	}
	if a, _ := fake.Action(mockInstanceID); a.Completions != 1 || a.EndReason != asgfake.EndCompleted || actor.Status().NoActiveAction {
		t.Fatalf("action = %+v, status %+v; want completed once, not counted as no_action", a, actor.Status())
	}
}

// mockLab is an imds-source Watcher reading the ec2-metadata-mock at a URL,
// with an Auto Scaling fake that holds the mock's instance in group web
// under the terminating hook drain.
type mockLab struct {
	watcher *Watcher
	fake    *asgfake.Server
	reg     *prometheus.Registry
	cfg     Config
	deps    Deps
}

func newMockLab(t *testing.T, url string, o asgfake.Options) mockLab {
	t.Helper()
	fake := asgfake.New(o)
	fake.AddGroup("web")
	if err := fake.AddInstance("web", mockInstanceID); err != nil {
		t.Fatal(err)
	}
	if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Sources = []string{SourceSignal, SourceIMDS}
	cfg.HookName = "drain"
	cfg.IMDSPollInterval = 100 * time.Millisecond
	reg := prometheus.NewRegistry()
	d := Deps{IMDS: imds.New(imds.Options{Endpoint: url, ClientEnableState: imds.ClientEnabled}), AutoScaling: newASGClient(fake, nil),
		InstanceID: mockInstanceID, Logger: testLogger(t), Registerer: reg}
	w, err := NewWatcher(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return mockLab{watcher: w, fake: fake, reg: reg, cfg: cfg, deps: d}
}
