package supervisor

import (
	"testing"

	"github.com/autodiag/autodiag/lifecycle"
)

// TestDrainEndingTable: the classification on its own, including the
// trigger sources only the lifecycle watcher produces.
func TestDrainEndingTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		source     string
		hadAction  bool
		toWarmPool bool
		want       Ending
	}{
		{lifecycle.SourceSignal, false, false, EndingDone},
		{lifecycle.TriggerSpot, false, false, EndingDone},
		{lifecycle.TriggerSpot, true, false, EndingDone},
		{lifecycle.SourceIMDS, true, false, EndingDone},
		{lifecycle.SourceSQS, true, false, EndingDone},
		{"admin", false, false, EndingDrained},
		{"admin", true, false, EndingDone},
		{sourceRestart, false, false, EndingDrained},
		{sourceRestart, true, false, EndingDone},
		{lifecycle.TriggerRebalance, false, false, EndingDone},
		{lifecycle.TriggerMaintenance, false, false, EndingDone},
		// Back to the warm pool (InService, then Warmed:*): the agent
		// comes back when the instance re-enters service.
		{lifecycle.SourceIMDS, true, true, EndingDrained},
		{sourceRestart, true, true, EndingDrained},
	} {
		if got := drainEnding(tc.source, tc.hadAction, tc.toWarmPool); got != tc.want {
			t.Errorf("drainEnding(%q, action %v, to warm pool %v) = %s, want %s", tc.source, tc.hadAction, tc.toWarmPool, got, tc.want)
		}
	}
}
