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
// Tests drive time through an injected Clock (see FakeClock), inject faults
// (throttling, 5xx, latency, dropped responses after the operation was
// applied) with Server.InjectFault, and inspect the result with Server.Calls,
// Server.Counters and Server.Queue.
//
// Not supported: FIFO queues, tags, permissions, message move tasks, KMS.
package sqsfake
