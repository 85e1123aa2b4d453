package state_test

import (
	"testing"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/state/statetest"
)

func TestMemoryConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T, c *statetest.FakeClock) state.Store {
		return state.NewMemory(state.MemoryOptions{
			Clock:     c,
			RecordTTL: statetest.RecordTTL,
			AuditMax:  statetest.AuditCap,
		})
	})
}
