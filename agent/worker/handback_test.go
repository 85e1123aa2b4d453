package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// deferSource records the delays the worker hands messages back with.
type deferSource struct {
	queue.Source
	mu     sync.Mutex
	delays []time.Duration
	err    error
}

func (s *deferSource) Defer(_ context.Context, _ *queue.Message, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delays = append(s.delays, d)
	return s.err
}

// TestHandBack: every reason hands the message back once with its delay,
// and ends the job as today: a release as released with the reason's
// label, a deferral without an outcome but with a "deferred" audit entry,
// a retry with neither; the drain's release happens once per job.
func TestHandBack(t *testing.T) {
	for _, tt := range []struct {
		b          back
		calls      int
		wantReason string // the audit entry's reason
		wantEnd    string // the audit entry's outcome; "" = none
	}{
		{back{why: backDrain, detail: detailDrain}, 2, "drain", outcome.Released},
		{back{why: backCancelled, detail: detailCancelled}, 1, "cancelled", outcome.Released},
		{back{why: backLimiterCancelled, detail: "context deadline exceeded"}, 1, "limiter_cancelled", outcome.Released},
		{back{why: backStateUnavailable, after: 2 * time.Second, detail: "redis down"}, 1, "state_unavailable", outcome.Released},
		{back{why: backRunningHere, after: time.Minute}, 1, "running_here", "deferred"},
		{back{why: backRunningElsewhere, after: time.Minute}, 1, "running_elsewhere", "deferred"},
		{back{why: backLimited, after: 3 * time.Second, reason: "concurrency", fields: map[string]string{"rule": "r"}}, 1, "concurrency", "deferred"},
		{back{why: backRetry, after: 4 * time.Second}, 1, "", ""},
	} {
		t.Run(tt.b.why.String(), func(t *testing.T) {
			src := &deferSource{err: errors.New("queue down")} // a failed hand-back is logged, not fatal
			store := state.NewMemory(state.MemoryOptions{})
			w, m := testWorker(t, Options{Source: src, Store: store, Clock: clock.NewManual(time.Unix(0, 0))})
			w.outcomes.received(true)
			j := &job{msg: &queue.Message{ID: "m1"}, task: task.Task{ID: "t1", Diagnostic: "df"}}
			for range tt.calls {
				w.pipeline.handBack(j, tt.b)
			}
			if len(src.delays) != 1 || src.delays[0] != tt.b.after {
				t.Errorf("Defer calls %v, want one of %s", src.delays, tt.b.after)
			}
			if got := testutil.ToFloat64(m.Inflight); got != 0 {
				t.Errorf("in flight %v after the hand-back, want 0", got)
			}
			if got := testutil.ToFloat64(m.Outcomes.WithLabelValues(UnknownDiagnostic, outcome.Released)); (got == 1) != (tt.wantEnd == outcome.Released) {
				t.Errorf("released counted %v, want the outcome %q", got, tt.wantEnd)
			}
			audit, err := store.RecentAudit(t.Context(), 10)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.wantEnd == "" && len(audit) != 0:
				t.Errorf("audit %+v, want none", audit)
			case tt.wantEnd != "" && (len(audit) != 1 || audit[0].Outcome != tt.wantEnd || audit[0].Reason != tt.wantReason):
				t.Errorf("audit %+v, want one %s with reason %s", audit, tt.wantEnd, tt.wantReason)
			}
		})
	}
}

// testWorker is New with o's Source, Store, Clock, Lease and InstanceID,
// one slot, no redaction rules, logs discarded and metrics of its own,
// which it returns for the test to read.
func testWorker(t *testing.T, o Options) (*Worker, Metrics) {
	t.Helper()
	red, err := redact.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := Metrics{
		Received:      prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}),
		Outcomes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "o"}, []string{"diagnostic", "outcome"}),
		Duration:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "d"}, []string{"diagnostic"}),
		Inflight:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "i"}),
		StateDegraded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s"}, []string{"op"}),
	}
	o.Logger, o.Metrics, o.Redactor = slog.New(slog.DiscardHandler), m, red
	o.Workers, o.BatchSize, o.StoreTimeout, o.Hard = 1, 1, time.Second, t.Context()
	return New(o), m
}
