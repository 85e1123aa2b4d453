// Package queue is the agent's intake: where task messages come from and how
// they are acknowledged, hidden, released or dead-lettered. Source is the
// seam between the agent and a concrete queue: Memory for embedded mode, SQS
// for a fleet.
package queue

import (
	"context"
	"errors"
	"time"
)

// ErrNoDeadLetter is returned by DeadLetter when no dead-letter queue is
// configured; the caller leaves the message to the queue's redrive policy.
var ErrNoDeadLetter = errors.New("queue: no dead-letter queue configured")

// ErrClosed is returned by Send and Receive after Close.
var ErrClosed = errors.New("queue: closed")

// Message attributes the queue sets on messages it re-sends or moves.
const (
	// RejectReasonAttribute carries DeadLetter's reason on the DLQ copy.
	RejectReasonAttribute = "autodiag-reject-reason"
	// TruncatedAttribute is set on a DLQ copy whose body was cut to fit the
	// DLQ's MaximumMessageSize: the original body's size in bytes.
	TruncatedAttribute = "autodiag-truncated"
	// DeferralsAttribute counts how often Defer re-sent a message.
	DeferralsAttribute = "autodiag-deferrals"
	// OriginalIDAttribute is the message id a re-sent message was first
	// sent with; Message.ID reads it so the id stays stable.
	OriginalIDAttribute = "autodiag-original-id"
)

// Message is one received task message.
type Message struct {
	// ID is the queue's message id (SQS MessageId) as first sent, kept
	// across Defer's re-sends; the task id when the body has none.
	ID string
	// Body is the raw task JSON.
	Body []byte
	// ReceiveCount is how many times the queue has handed this message out,
	// this time included (SQS ApproximateReceiveCount).
	ReceiveCount int
	// SentAt is when the message was first sent, zero when unknown.
	SentAt time.Time
	// Attributes are the message's string attributes (traceparent and
	// tracestate among them when the sender traced, see agent/tracing).
	Attributes map[string]string
	// TraceHeader is SQS's AWSTraceHeader system attribute (an X-Ray trace
	// header) when a producer set it; "" otherwise.
	TraceHeader string
	// Handle is the backend's receipt handle; opaque to the agent.
	Handle string
	// ReceivedAt is when another agent's receive of this receipt began,
	// for a message it handed here with its Handle: Hold counts the
	// message's time in flight from it, so a hand-off's time in transit
	// does not let the visibility lapse. Zero for a message received by
	// this source, which knows its own receive.
	ReceivedAt time.Time
}

// Sealer is a Source that only this agent consumes (the embedded queue,
// fed by POST /v1/tasks): a message in it was accepted by this agent and
// nothing else will ever receive it, so it is received work even before a
// receive took it. The agent seals it when its intake stops, and takes in
// what Seal returns as it does a receive's messages; from then on Send and
// Receive fail with ErrClosed.
type Sealer interface {
	Seal() []*Message
}

// Source is a task queue. Implementations are safe for concurrent use.
type Source interface {
	// Receive waits (long poll) for at most max messages. No receive starts
	// once ctx is done, and a poll in progress ends with ctx.Err() at once
	// or, for a remote queue, after a short grace in which an answer already
	// on its way is still taken; messages returned with a nil error are the
	// caller's even when ctx has ended.
	Receive(ctx context.Context, max int) ([]*Message, error)
	// Delete acknowledges a message whose task has ended. Implementations
	// may batch deletes; Close flushes them.
	Delete(ctx context.Context, m *Message) error
	// ChangeVisibility hides m for d from now; d == 0 releases the message
	// to other consumers at once. Each such release costs a receive of the
	// queue's maxReceiveCount; Defer does not.
	ChangeVisibility(ctx context.Context, m *Message, d time.Duration) error
	// Defer hands m back to be received again after delay (0: at once), for
	// limiter deferrals and drain releases. Unlike ChangeVisibility it never
	// spends the message's way to the dead-letter queue: once the receive
	// count nears the queue's maxReceiveCount, m is re-sent as a new message
	// (DeferralsAttribute counting the deferrals, OriginalIDAttribute keeping
	// its ID) and the old one deleted.
	Defer(ctx context.Context, m *Message, delay time.Duration) error
	// Hold keeps m hidden, extending its visibility in the background, until
	// release is called or m is deleted, deferred, dead-lettered or its
	// visibility changed; a message received ahead of a free worker must not
	// lapse and be received again while it waits. release is idempotent and
	// returns once no extension of m is in progress.
	Hold(m *Message) (release func())
	// DeadLetter moves m to the dead-letter queue with reason attached and
	// deletes it from the source, or returns ErrNoDeadLetter.
	DeadLetter(ctx context.Context, m *Message, reason string) error
	// Send enqueues a new message and returns its id.
	Send(ctx context.Context, body []byte) (string, error)
	// Close flushes pending acknowledgements and releases resources.
	Close(ctx context.Context) error
}
