package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/launch"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/lifecycle"
)

const launchHookName = "launch-hook"

// launchAgent opens an embedded agent whose launch hook is completed on an
// Auto Scaling fake, with extra catalog entries; it returns the agent and
// the fake, the instance waiting in Pending:Wait.
func launchAgent(t *testing.T, timeout time.Duration, extra ...runner.Diagnostic) (*Agent, *asgfake.Server) {
	t.Helper()
	fake := asgfake.New(asgfake.Options{Seed: 1})
	fake.AddGroup(endingASG)
	if err := fake.PutHook(asgfake.Hook{Group: endingASG, Name: launchHookName, Transition: asgfake.TransitionLaunching,
		HeartbeatTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if acts, err := fake.Launch(endingASG, endingInstance, asgfake.PlaceGroup); err != nil || len(acts) != 1 {
		t.Fatalf("Launch = %v, %v", acts, err)
	}
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	client := autoscaling.NewFromConfig(sqsfake.SDKConfig(ts.URL), func(o *autoscaling.Options) {
		o.Retryer = retry.AddWithMaxAttempts(o.Retryer, 1)
	})

	cfg, err := config.Load([]byte(testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Diagnostics = append(cfg.Diagnostics, extra...)
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: endingInstance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	// Open would need AWS for the Actor; this one talks to the fake: the
	// agent is built again over Open's resources with it.
	cfg = a.cfg
	cfg.Lifecycle.LaunchHookName, cfg.Lifecycle.LaunchTimeout, cfg.Lifecycle.ASGName = launchHookName, timeout, endingASG
	d := a.d
	d.Actor = lifecycle.NewActor(cfg.Lifecycle, lifecycle.Deps{AutoScaling: client, InstanceID: endingInstance})
	d.Registry = prometheus.NewRegistry()
	if a, err = New(cfg, d); err != nil {
		t.Fatal(err)
	}
	return a, fake
}

// readyzStatus is /readyz's code and status.
func readyzStatus(t *testing.T, a *Agent) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/readyz", nil))
	var body struct{ Status string }
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body.Status
}

// TestLaunchGate: intake waits for the launch hook; a catalog program
// that is missing fails its readiness check, so the launch is abandoned at
// launch_timeout with the check on /v1/status, /readyz says abandoned and
// the agent takes no work; with every program present it continues at once
// and /readyz turns 200.
func TestLaunchGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		extra  []runner.Diagnostic
		result string
		state  string // /readyz and /v1/status once decided
	}{
		{"ready", nil, asgfake.ResultContinue, "running"},
		{"program missing", []runner.Diagnostic{{Name: "gone", Command: []string{"/nonexistent/autodiag-test-prog"}, Timeout: time.Second}},
			asgfake.ResultAbandon, launch.StateAbandoned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, fake := launchAgent(t, time.Second, tc.extra...)
			done := make(chan error, 1)
			go func() { done <- a.Run(context.Background()) }()
			<-a.Started()
			if code, st := readyzStatus(t, a); code != http.StatusServiceUnavailable || st != launch.StateStarting {
				// The gate may already be through for "ready": only a 200
				// before the completion would be wrong.
				if act, _ := fake.Action(endingInstance); code == http.StatusOK && !act.Ended {
					t.Fatalf("/readyz 200 before the launch hook was completed")
				}
			}
			deadline := time.Now().Add(lifecycle.DefaultCompleteTimeout)
			for a.gate.State() == launch.StateStarting && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polls the gate's own flag, not a guess at its duration
			}
			act, _ := fake.Action(endingInstance)
			if !act.Ended || act.Result != tc.result || act.Completions != 1 {
				t.Fatalf("launching action %+v; want completed %s once", act, tc.result)
			}
			wantCode := http.StatusOK
			if tc.state != "running" {
				wantCode = http.StatusServiceUnavailable
			}
			if code, st := readyzStatus(t, a); code != wantCode || (code != http.StatusOK && st != tc.state) {
				t.Errorf("/readyz = %d %q, want %d %s", code, st, wantCode, tc.state)
			}
			st := a.Status()
			if st.State != tc.state || st.Launch == nil || !st.Launch.Completed || st.Launch.Result != tc.result {
				t.Errorf("status state %s, launch %+v", st.State, st.Launch)
			}
			if tc.result == asgfake.ResultAbandon {
				var named bool
				for _, c := range st.Launch.Checks {
					named = named || (c.Name == "program gone" && !c.OK)
				}
				if !named {
					t.Errorf("launch checks %+v; want program gone failing", st.Launch.Checks)
				}
			}
			a.Drain("admin", "test")
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(supervisor.CompletionTimeout + supervisor.ReleaseGrace):
				t.Fatal("Run did not return")
			}
		})
	}
}
