// Package sqsfake is an in-process fake of Amazon SQS standard queues that
// speaks the AWS JSON 1.0 protocol used by aws-sdk-go-v2/service/sqs
// (POST, X-Amz-Target: AmazonSQS.<Op>, Content-Type:
// application/x-amz-json-1.0). Tests of the agent, including end-to-end tests
// that run the real autodiag binary with AWS_ENDPOINT_URL_SQS pointed at it,
// use it as ground truth for the drain and exactly-once guarantees, so it
// follows the SQS documentation rather than convenience:
//
//   - visibility timeouts, receive counts, ChangeMessageVisibility (0 makes a
//     message visible at once; the total stays within 12 hours of the receive),
//     DelaySeconds, retention expiry, redrive to a dead-letter queue on the
//     receive that would exceed maxReceiveCount, long polling that returns as
//     soon as a message is available, the 120,000 in-flight limit (OverLimit);
//   - MD5OfMessageBody / MD5OfMessageAttributes computed as SQS does;
//   - batch limits and per-entry partial failures;
//   - AWS error shapes: {"__type": "com.amazonaws.sqs#X", "message": ...} plus
//     the x-amzn-query-error header, so the SDK returns its typed errors.
//
// Receipt handles. Every receive issues a new handle. A handle that was never
// issued by this server (or by another queue) is ReceiptHandleIsInvalid.
// DeleteMessage with a handle that is not the message's most recent one (the
// message was received again since) SUCCEEDS AND DELETES NOTHING — the AWS
// documentation says "the request will still succeed, but the message might
// not be deleted"; the fake always takes the "not deleted" branch, because
// that is the branch that exposes consumers that delete with stale handles.
// Such deletes are counted (QueueStats.StaleDeletes) and logged in the call
// log. DeleteMessage for a message already gone (deleted, expired, moved to
// the DLQ) succeeds, as in SQS. ChangeMessageVisibility with a stale handle or
// for a message that is gone fails with InvalidParameterValue ("Message does
// not exist or is not available for visibility timeout change"), and with the
// current handle of a message whose visibility already lapsed fails with
// AWS.SimpleQueueService.MessageNotInflight (typed *types.MessageNotInflight).
//
// Tests drive time through an injected Clock (see FakeClock; Waiters tells
// when a long poll is blocked), inject faults (throttling, 5xx, latency,
// dropped responses after the operation was applied, per-entry batch
// failures, duplicate deliveries) with Server.InjectFault,
// and inspect the result with Server.Calls (one entry per HTTP request, with
// the SDK's invocation id and attempt number, so retries are countable),
// Server.Counters, Server.Pollers and Server.Queue (visible / in-flight /
// delayed counts, live messages, and the history of every message with its
// receive count and fate: deleted, expired, purged, moved).
//
// Choices where SQS leaves room, made to be deterministic and to expose bugs:
//   - a short poll (WaitTimeSeconds 0) returns every visible message up to
//     MaxNumberOfMessages; SQS may sample servers and return fewer or none;
//   - a long poll returns as soon as at least one message is available;
//   - long polls blocked on one queue are served in the order they began
//     waiting: each message that becomes visible wakes the poll that has
//     waited longest of those not woken yet, which gets it unless a new
//     receive takes it first (a poll its timer wakes meanwhile leaves it
//     to the polls ahead of it). SQS names no order; waking every poll
//     let the Go scheduler choose, and it favoured the newest, so one
//     quick consumer took most of the work while the others waited;
//   - a message moved to the dead-letter queue keeps its MessageId, body,
//     attributes, SentTimestamp (retention counts from the original send, as
//     SQS does for standard queues) and its receive count;
//   - MaximumMessageSize defaults to 262144 (256 KiB); it can be raised to
//     1 MiB with the queue attribute;
//   - the SDK omits zero integers, so ReceiveMessage cannot ask for a
//     VisibilityTimeout of 0 (the queue default applies) and a
//     ChangeMessageVisibility without VisibilityTimeout means 0;
//   - long polls abandoned by the client are not logged as calls;
//   - Server.Close ends blocked long polls with an empty response.
//
// Not supported: FIFO queues (and MessageDeduplicationId), tags, permissions,
// message move tasks, KMS, list-valued message attributes. Message histories
// are kept for the life of the Server (fine for tests and benchmarks).
package sqsfake
