package notify

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// Entry is one event for one sink, as the outbox holds it.
type Entry struct {
	// ID is the event's delivery id, the same for every sink and retry.
	ID     string
	Sink   string
	Event  EventType
	Origin string    // instance that wrote it
	Time   time.Time // when it was written
	Body   []byte    // the event JSON, exactly as a webhook receives it
}

// Delivery is an Entry claimed by one agent for one attempt.
type Delivery struct {
	Entry
	// Attempt counts the claims of this entry, 1 for the first.
	Attempt  int
	ref      string // the outbox's handle: a stream id, a sequence number
	consumer string // who claimed it
}

// DeadEntry is an entry that was given up, with why.
type DeadEntry struct {
	Entry
	Attempts int
	Reason   string
	DiedAt   time.Time
	Ref      string // the dead list's handle, for Requeue
}

// Outbox is where events wait until a sink took them. Each sink has its
// own lane: entries are claimed by sink, so that one sink's backlog or
// retries never stand in front of another's. Entries are claimed by a
// consumer (an agent) and stay pending under it until acknowledged,
// scheduled for a retry or given up; a pending entry whose consumer has
// not touched it for the claim idle time is claimed by another.
type Outbox interface {
	// Enqueue writes entries durably, in one round trip, and returns
	// their handles (for Ack of an entry delivered without a claim).
	Enqueue(ctx context.Context, entries []Entry) ([]string, error)
	// Claim returns at most max entries of sink for consumer to send:
	// pending entries whose retry is due or whose holder went quiet
	// first, then new ones. No new entries when newWork is false (a
	// draining agent finishes what others gave up, not the fresh work of
	// the fleet).
	Claim(ctx context.Context, consumer, sink string, max int, newWork bool) ([]Delivery, error)
	// Ack removes a delivered entry. An entry delivered straight from
	// Enqueue (a draining agent's own events) may be acknowledged by its
	// handle without a claim; a copy another agent claimed meanwhile
	// is then gone when it tries to ack or retry it.
	Ack(ctx context.Context, d Delivery) error
	// Retry leaves the entry pending, to be claimed again at at (by any
	// consumer).
	Retry(ctx context.Context, d Delivery, at time.Time) error
	// Dead moves the entry to the dead list with reason.
	Dead(ctx context.Context, d Delivery, reason string) error
	// Shed moves the oldest entries of sink past the outbox's cap
	// (MaxLen) to the dead list with reason ReasonOutboxFull, at most
	// limit of them, and returns them, for the caller to count and log.
	// An entry in flight (claimed less than ClaimIdle ago and not waiting
	// for a retry) is skipped, the next oldest going instead: its holder
	// ends it, so it is never both delivered and dead-lettered.
	Shed(ctx context.Context, sink string, limit int) ([]DeadEntry, error)
	// MaxLen is the cap of each sink's lane, in entries.
	MaxLen() int64
	// Pending is how many entries of sink wait: new, in flight or waiting
	// to retry.
	Pending(ctx context.Context, sink string) (int64, error)
	// ListDead returns at most max dead entries, newest first.
	ListDead(ctx context.Context, max int) ([]DeadEntry, error)
	// Requeue moves dead entries (by Ref) back into the outbox, keeping
	// their delivery ids; it returns how many it moved.
	Requeue(ctx context.Context, refs []string) (int, error)
	// ClaimIdle is how long a claimed entry stays its holder's: a
	// delivery must end well within it.
	ClaimIdle() time.Duration
	// AddArgs is the XADD that writes e, for the state store to make in
	// the round trip of a task's final record (Dispatcher.Enqueued once
	// it landed); nil when the outbox is not on Redis: Enqueue then.
	AddArgs(e Entry) *redis.XAddArgs
}

// ReasonOutboxFull is the dead-letter reason of an entry shed because its
// sink's lane of the outbox was past its cap.
const ReasonOutboxFull = "outbox_full"

// ErrReset says the outbox was found gone (Redis restarted empty, or its
// keys were removed) and was created again: entries it held are lost.
var ErrReset = errors.New("notify: outbox was reset; pending notifications are lost")

// Defaults of the outboxes.
const (
	DefaultClaimIdle = 2 * time.Minute
	DefaultDeadMax   = 10000
	DefaultMaxLen    = 100000
)

// withOutboxDefaults applies the defaults to the options both outboxes
// take (MemoryOptions, RedisOptions): a value not above zero, or no clock,
// takes its default.
func withOutboxDefaults[N int | int64](claimIdle *time.Duration, deadMax, maxLen *N, c *clock.Clock) {
	if *claimIdle <= 0 {
		*claimIdle = DefaultClaimIdle
	}
	if *deadMax <= 0 {
		*deadMax = DefaultDeadMax
	}
	if *maxLen <= 0 {
		*maxLen = DefaultMaxLen
	}
	if *c == nil {
		*c = clock.Wall{}
	}
}
