package statetest

import "github.com/autodiag/autodiag/agent/state"

// Roles is a store that answers every role: a test's wrapper that embeds
// a state.Store and overrides some of its calls (a store that fails or
// stalls on cue).
type Roles interface {
	state.LeaseStore
	state.TaskStore
	state.AuditLog
	state.Presence
	state.Marks
}

// Store is the state.Store whose every role is r, for a wrapper to stand
// where a Store goes.
func Store(r Roles) state.Store {
	return state.Store{LeaseStore: r, TaskStore: r, AuditLog: r, Presence: r, Marks: r}
}
