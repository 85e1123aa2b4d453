// Package listener builds the HTTP alert intake: the handler over
// agent/alert's decoders and router with its credentials (NewHandler), the
// senders that put the tasks onto the task queue (SourceSender,
// SQSSender), and the standalone intake of `autodiag intake` (Intake,
// Open), which has no workers. The agent's own listener uses NewHandler
// too, with its log lines redacted; CloudWatch alarms arriving on the
// task queue are routed by the worker (worker/route.go).
//
// It may not import the agent root, the worker or the supervisor; the
// caller opens the SQS client.
package listener
