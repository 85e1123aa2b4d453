package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
)

type noHooks struct{}

func (noHooks) DrainStarted(drain.Progress)                                         {}
func (noHooks) DrainEnded(context.Context, drain.Progress, *lifecycle.Action, bool) {}
func (noHooks) CompletionFailed(drain.Progress)                                     {}

// TestDrainStartedSaysWhatItTookOn: the "drain started" line counts the
// work the drain waits for at its start. A task has a worker (it is
// running, to the drain) before its lease and limiter decision, so its
// diagnostic may begin after the trigger; the fleet simulation times a
// drain against those tasks too, and knows them only from this line (it
// counted none and called a drain that finished such a 3.6 s task "3.8 s
// with nothing running").
func TestDrainStartedSaysWhatItTookOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		queued                  string
		wantRunning, wantQueued int
		wantReleased            int
	}{
		{drain.QueuedRelease, 1, 0, 1},
		{drain.QueuedFinish, 1, 1, 0},
	} {
		t.Run(tc.queued, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(time.Unix(1_800_000_000, 0))
			dc := drain.New(drain.Config{Timeout: time.Minute, Queued: tc.queued}, drain.WithClock(clock.Wall{}))
			released := 0
			dc.Track(nil).Start(func() {})  // has its worker; its diagnostic not begun
			dc.Track(func() { released++ }) // received, waiting for a worker
			var buf bytes.Buffer
			stopped := false
			gauge := func() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}) }
			s := New(Options{Drain: dc, Clock: clk, Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Hooks: noHooks{},
				Gauges:     Gauges{DrainState: gauge(), DrainDuration: gauge(), DrainDeadline: gauge()},
				StopIntake: func() { stopped = true }})
			if !s.Start(drain.Trigger{Source: lifecycle.SourceSQS, Reason: "test"}, nil) {
				t.Fatal("Start = false, want the first trigger to start the drain")
			}
			if !stopped || released != tc.wantReleased {
				t.Fatalf("intake stopped %v, released %d; want stopped, %d released", stopped, released, tc.wantReleased)
			}
			var line struct {
				Msg     string `json:"msg"`
				Running *int   `json:"running"`
				Queued  *int   `json:"queued"`
			}
			for l := range bytes.Lines(buf.Bytes()) {
				if err := json.Unmarshal(l, &line); err == nil && line.Msg == "drain started" {
					break
				}
				line.Msg = ""
			}
			switch {
			case line.Msg == "":
				t.Fatalf("no drain started line in %s", buf.String())
			case line.Running == nil || line.Queued == nil:
				t.Fatalf("drain started line without running and queued: %s", buf.String())
			case *line.Running != tc.wantRunning || *line.Queued != tc.wantQueued:
				t.Errorf("drain started running %d queued %d, want %d and %d", *line.Running, *line.Queued, tc.wantRunning, tc.wantQueued)
			}
		})
	}
}
