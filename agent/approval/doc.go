// Package approval holds the tasks whose diagnostic needs a person's
// approval (catalog `approval: required`) until a person decides, and
// sends each one back through the task queue once decided, so that the
// worker's normal path runs it (and the limiter decides then) or ends it
// `denied`.
//
// The worker's gate (Approvals.Gate) parks a task: its message body is
// stored (Store: Redis in fleet mode, memory in embedded mode) before the
// message is acknowledged, so a parked task holds no worker, no receive
// slot and no concurrency slot, and is not lost with the agent. A person
// decides with Approvals.Decide (POST /v1/approvals/{task_id}, `autodiag
// approve|deny`, a Slack button); Approvals.Sweep, run every SweepEvery on
// every agent, ends the unanswered ones at their deadline as `timeout`
// and sends again what a decision could not send. When the message comes
// back, the gate finds the decision and the worker runs the task or ends
// it `denied` (reason approval_denied or approval_timeout), naming who
// decided in the record, the audit entry and the trace.
//
// It imports no part of the agent: the queue is a send function, the
// outbox a function of Event.
package approval
