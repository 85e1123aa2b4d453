// Package listener builds the alert listener, the HTTP endpoint alerting
// systems post to (configured by the intake: section): the handler over
// agent/alert's decoders and router with its credentials (NewHandler), the
// sender that puts the tasks onto the fleet's SQS task queue (SQSSender;
// an agent sends through its one way in, worker.Submitter), and the standalone listener of `autodiag intake`
// (Standalone, Open), which has no workers. The agent's own listener uses
// NewHandler too, with its log lines redacted; CloudWatch alarms arriving
// on the task queue are routed by the worker (worker/route.go).
//
// "Intake" in this project is the queue's receive loop; the listener is
// not part of it.
//
// It may not import the agent root, the worker or the supervisor; the
// caller opens the SQS client.
package listener
