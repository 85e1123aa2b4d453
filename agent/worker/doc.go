// Package worker takes each task from the queue to its one outcome. Read
// it top to bottom in this order:
//
//   - receiver.go: the SQS (or memory) receive loop, receiving only while
//     there are free slots in the receive window (window.go: workers plus
//     a prefetch that follows the rate and the receive's round trip);
//   - pipeline.go: each message's life (pipeline), its methods in the
//     order it is lived: accept → validate (or reject) → wait for
//     approval → place (or hand to the host's agent) → claim → decide
//     (limiter) → run → record (redact, Hooks.Keep) → finish (one store
//     call with Hooks.Writes) → ack, or hand back with a reason
//     (handback.go names the reasons); route.go turns a body that is no
//     task but an alarm into its tasks; place.go holds what a target
//     task's placement waits for and ends with; backlog.go keeps what the
//     store could not take;
//   - lease.go: the execution lease kept alive while a task runs (leases)
//     and the bound of every store call (storeCalls);
//   - outcome.go: the one place an outcome is written (log line, metric,
//     audit entry); the outcome names are internal/outcome;
//   - recover.go: what a previous process of this instance left in flight;
//   - submit.go: the one way a task enters the queue from outside it
//     (Submitter: POST /v1/tasks, an investigation's tool call, an
//     alert's tasks), validate → reject → stamp → send.
//
// It owns the task's lease, its record, its outcome and the message's
// visibility. It takes its collaborators as narrow interfaces (Store,
// Decider, Runner, Validator, Hooks, Tracker) and may not import the agent
// root, the supervisor, the hooks, lifecycle or any AWS SDK package: what
// happens after a task ends is behind Hooks, the drain is the Tracker
// (*drain.Controller) it is handed.
package worker
