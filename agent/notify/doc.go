// Package notify delivers what the agent has to say (a task ended, a
// root-cause report is ready, a drain started or ended) to webhooks and
// Slack, at least once.
//
// An event is written to an Outbox (a Redis stream with a consumer group
// in fleet mode, memory in embedded mode) in one round trip, one entry per
// subscribed sink, and the caller goes on. A Dispatcher on every agent
// claims entries, sends them and acknowledges each only after a 2xx
// answer. A failed send stays pending and is retried with capped
// exponential backoff and jitter (or after the receiver's Retry-After) by
// whichever agent claims it next; an entry whose holder died is taken over
// by another agent once it has been idle for the outbox's claim idle time.
// After MaxAttempts attempts, past MaxAge, or at once on a 4xx that
// retrying cannot fix, the entry goes to a capped dead list.
//
// Every delivery of an event carries the same delivery id (the
// X-Autodiag-Delivery header and the body's delivery_id), so receivers
// dedupe. Secrets (a Slack webhook URL, an HMAC key) come from the
// environment; this package never logs them and no error it returns
// contains them.
package notify
