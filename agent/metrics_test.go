package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TestMetricNamesLint runs promlint over everything an embedded agent
// registers (its own series, the limiter's, Go and process collectors) and
// checks the names the README documents are there.
func TestMetricNamesLint(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: "lint"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	// Touch the vectors so they are exported.
	a.m.outcomes.WithLabelValues("uptime", outcome.Succeeded).Add(0)
	a.m.duration.WithLabelValues("uptime").Observe(0)
	problems, err := testutil.GatherAndLint(a.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "autodiag_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"autodiag_tasks_received_total", "autodiag_task_outcomes_total", "autodiag_task_duration_seconds",
		"autodiag_tasks_inflight", "autodiag_tasks_receive_window", "autodiag_limiter_degraded_total", "autodiag_drain_state",
		"autodiag_drain_duration_seconds", "autodiag_redis_up", "autodiag_state_degraded_total"} {
		if !have[name] {
			t.Errorf("metric %s is not registered", name)
		}
	}
}

// TestDrainDeadlineGauge: autodiag_drain_deadline_timestamp_seconds is 0
// before a drain and, once draining, the drain's own deadline (start +
// lifecycle.drain_timeout), which the Prometheus rule AutodiagDrainStuck
// compares with time().
func TestDrainDeadlineGauge(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	if got := testutil.ToFloat64(ta.m.drainDeadline); got != 0 {
		t.Fatalf("deadline before a drain = %v, want 0", got)
	}
	ta.post(t, `{"id":"d-1","host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"30"}}`)
	waitFor(t, "running", func() bool { return ta.Status().Inflight == 1 })
	if !ta.Drain("test", "deadline gauge") {
		t.Fatal("Drain returned false")
	}
	d := ta.Status().Drain
	if d == nil {
		t.Fatal("no drain block while draining")
	}
	if got, want := testutil.ToFloat64(ta.m.drainState), 1.0; got != want {
		t.Fatalf("drain state = %v, want %v", got, want)
	}
	got := testutil.ToFloat64(ta.m.drainDeadline)
	if want := float64(d.Deadline.UnixNano()) / 1e9; got != want {
		t.Fatalf("deadline gauge = %v, want the drain's deadline %v (%s)", got, want, d.Deadline)
	}
	if budget := d.Deadline.Sub(d.StartedAt); budget != ta.cfg.Drain.Timeout {
		t.Fatalf("deadline - start = %s, want lifecycle.drain_timeout %s", budget, ta.cfg.Drain.Timeout)
	}
}
