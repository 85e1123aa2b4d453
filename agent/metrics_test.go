package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricNamesLint runs promlint over everything an embedded agent
// registers (its own series, the limiter's, Go and process collectors) and
// checks the names the README documents are there.
func TestMetricNamesLint(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: "lint"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	// Touch the vectors so they are exported.
	a.m.outcomes.WithLabelValues("uptime", OutcomeSucceeded).Add(0)
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
		"autodiag_tasks_inflight", "autodiag_limiter_degraded_total", "autodiag_drain_state",
		"autodiag_drain_duration_seconds", "autodiag_redis_up", "autodiag_state_degraded_total"} {
		if !have[name] {
			t.Errorf("metric %s is not registered", name)
		}
	}
}
