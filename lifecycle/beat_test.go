package lifecycle

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// TestBeat: the one heartbeat a resumed drain sends retries throttling
// until it lands, and reports an action that is gone.
func TestBeat(t *testing.T) {
	cases := []struct {
		name      string
		throttled int           // first attempts answered Throttling
		idle      time.Duration // fake time before Beat (the action expires past 60s)
		wantErr   bool
		wantBeats int // heartbeats accepted by Auto Scaling
	}{
		{name: "at once", wantBeats: 1},
		{name: "after throttling", throttled: 2, wantBeats: 1},
		{name: "action gone", idle: 2 * time.Minute, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newActorEnv(t, testConfig(10*time.Second, 60*time.Second), 60*time.Second, nil)
				if tc.throttled > 0 {
					e.fake.InjectFault(asgfake.Fault{Op: "RecordLifecycleActionHeartbeat", Code: "Throttling", Count: tc.throttled})
				}
				time.Sleep(tc.idle)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				err := e.actor.Beat(ctx, e.act)
				if (err != nil) != tc.wantErr {
					t.Fatalf("Beat = %v; want error %v", err, tc.wantErr)
				}
				if tc.wantErr && !isNoActiveAction(err) {
					t.Fatalf("Beat = %v; want the no-active-action error", err)
				}
				a, _ := e.fake.Action("i-1")
				if a.Heartbeats != tc.wantBeats {
					t.Fatalf("Auto Scaling accepted %d heartbeats; want %d", a.Heartbeats, tc.wantBeats)
				}
				if got := len(heartbeatTimes(e.fake, "Throttling")); got != tc.throttled {
					t.Fatalf("%d throttled attempts; want %d", got, tc.throttled)
				}
			})
		})
	}
}
