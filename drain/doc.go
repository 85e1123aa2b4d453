// Package drain is the agent's shutdown state machine: running → draining →
// drained. It stops intake at the first instant of a drain, tracks received
// and running work, waits for it with a bound, and at the deadline releases
// what has not started and cancels what is still running.
//
// The package imports no other autodiag package but the shared leaves
// internal/configerr and internal/clock, no AWS and no Redis.
package drain
