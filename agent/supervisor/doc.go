// Package supervisor owns a drain from its trigger to its Ending: it stops
// intake, finds the lifecycle action (the trigger's, IMDS's
// Terminating:Wait, or one that begins during the drain), persists the
// drain so a restarted agent resumes it, heartbeats the action while work
// remains, tells Hooks of the drain's start and end, completes the action
// exactly once on a detached bounded context and classifies how the drain
// ended (Ending, ending.go). The process's exit code is cmd's decision
// (cmd/autodiag/main.go maps an Ending to one).
//
// The walk reads top to bottom in supervisor.go: Start → Run
// (initialAction, heartbeat or awaitAction, drain.Wait, probeAction,
// Hooks.DrainEnded, complete, persist, drainEnding). The lifecycle
// action's steps (probe, await, heartbeat, complete) are actions'
// (action.go); the persisted drain is drainStore's (persist.go).
//
// It takes the drain's other parties as narrow interfaces (Hooks,
// Publisher, InstanceRecord, Watcher, Actor) and may not import the agent root, the
// worker, the hooks or any AWS SDK package; it calls Auto Scaling and
// IMDS only through lifecycle.
package supervisor
