package state_test

import (
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/state/statetest"
	"github.com/autodiag/autodiag/internal/clock"
)

func TestMemoryConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T, c *clock.Manual) state.Store {
		return state.NewMemory(state.MemoryOptions{
			Clock:     c,
			RecordTTL: statetest.RecordTTL,
			AuditMax:  statetest.AuditCap,
		})
	})
}

// TestMemoryClaimThenFoldsNothing: memory has no script to run a Then
// in, so ClaimThen answers folded false and claims nothing: the caller
// makes the claim and the decision as two calls.
func TestMemoryClaimThenFoldsNothing(t *testing.T) {
	s := state.NewMemory(state.MemoryOptions{})
	c, reply, folded, err := s.ClaimThen(t.Context(), state.TaskRecord{ID: "t1"}, "i-1", time.Minute, state.Then{Source: "return 1"})
	if err != nil || folded || reply != nil || c.Result != state.Claimed || c.Record.ID != "" {
		t.Fatalf("ClaimThen = %+v, %v, folded %v, %v; want nothing done", c, reply, folded, err)
	}
	if _, ok, err := s.Task(t.Context(), "t1"); ok || err != nil {
		t.Fatalf("Task(t1) after ClaimThen: ok %v, %v; want no record", ok, err)
	}
}
