package lifecycle

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsLintAndShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newMetrics(reg)
	b := newMetrics(reg) // a second Actor on the same registry reuses the counters
	a.heartbeats.WithLabelValues("ok").Inc()
	b.heartbeats.WithLabelValues("ok").Inc()
	if v := counter(t, reg, "autodiag_lifecycle_heartbeats_total", "result", "ok"); v != 2 {
		t.Fatalf("heartbeats_total{ok} = %v; want 2 from both actors", v)
	}
	for _, c := range []prometheus.Collector{a.heartbeats, a.completions, a.sourceErrors} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil || len(problems) != 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	}
	_ = newMetrics(nil) // unregistered: must not panic
}

func TestActionJSONRoundTrip(t *testing.T) {
	in := Action{InstanceID: "i-1", ASGName: "web", HookName: "drain", Token: "tok",
		Started: time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC), NotificationQueueURL: "https://sqs/q", NotificationReceipt: "rh"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Action
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip = %+v, %v; want %+v (json %s)", out, err, in, b)
	}
}
