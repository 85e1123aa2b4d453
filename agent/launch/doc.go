// Package launch is the launch gate: intake waits until the readiness
// checks pass and the launch hook is completed (lifecycle.GateIntake), and
// while the instance sits in a warm pool; the gate's phase is what
// /readyz, /v1/status and the instance record tell before a drain.
//
// It may not import the agent root or its other parts.
package launch
