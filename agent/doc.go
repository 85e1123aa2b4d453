// Package agent wires intake (an SQS queue or the embedded in-memory queue),
// task validation, the limiter, the diagnostic runner, state, drain and
// lifecycle into the program `autodiag run` executes.
package agent
