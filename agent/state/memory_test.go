package state_test

import (
	"testing"

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
