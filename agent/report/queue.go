package report

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// Job is one report to write: the evidence of a finished task. The
// output in it is already redacted and cut to the prompt's input bounds.
type Job struct {
	// ID is the task id: at most one report job per task is expected,
	// and the Sink writes the Result into that task's record.
	ID         string    `json:"id"`
	Evidence   Evidence  `json:"evidence"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Force skips the limiter's cooldown (not the daily cap).
	Force bool `json:"force,omitempty"`
	// TraceID and SpanID are the task's trace and process span (its
	// record's): the report's spans are recorded under it.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
}

// Claimed is a job taken by one consumer; it stays that consumer's until
// Ack or until the queue's lease ends, then another may take it.
type Claimed struct {
	Job
	Attempt int // 1 for the first claim
	ref     string
}

// Queue is where report jobs wait, durably, until a worker took them.
type Queue interface {
	// Enqueue writes a job in one round trip.
	Enqueue(ctx context.Context, j Job) error
	// Claim takes at most one job for consumer: one whose holder's
	// lease ended first, else a new one; ok false when there is none.
	Claim(ctx context.Context, consumer string) (c Claimed, ok bool, err error)
	// Ack removes a finished job.
	Ack(ctx context.Context, c Claimed) error
	// Len is how many jobs wait or are in progress.
	Len(ctx context.Context) (int64, error)
	// AddArgs is the XADD that queues j, for the state store to make in
	// the round trip of a task's final record (Reporter.Kick once it
	// landed); nil when the queue is not on Redis: Enqueue then.
	AddArgs(j Job) (*redis.XAddArgs, error)
}

// Shedder is a Queue with a cap: Shed takes the oldest jobs past it, at
// most limit, out of the queue and returns them, so that the Reporter
// ends each `skipped` rather than the cap dropping it unseen.
type Shedder interface {
	Shed(ctx context.Context, limit int) ([]Job, error)
}

// DefaultLease is how long a claimed job stays its holder's when the
// queue is given none: longer than any report (Config.Timeout) plus a
// drain, so only a dead agent's job is taken over.
const DefaultLease = 5 * time.Minute

// MemoryQueue is the Queue of embedded mode.
type MemoryQueue struct {
	mu    sync.Mutex
	jobs  []*memJob
	seq   uint64
	lease time.Duration
	clock clock.Clock
}

type memJob struct {
	Claimed
	holder string
	until  time.Time
}

var _ Queue = (*MemoryQueue)(nil)

// AddArgs implements Queue: nil, memory has no stream to write.
func (q *MemoryQueue) AddArgs(Job) (*redis.XAddArgs, error) { return nil, nil }

// NewMemoryQueue returns an empty queue; lease 0 is DefaultLease, clk nil
// is the wall clock.
func NewMemoryQueue(lease time.Duration, clk clock.Clock) *MemoryQueue {
	if lease <= 0 {
		lease = DefaultLease
	}
	if clk == nil {
		clk = clock.Wall{}
	}
	return &MemoryQueue{lease: lease, clock: clk}
}

// Enqueue implements Queue.
func (q *MemoryQueue) Enqueue(ctx context.Context, j Job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	q.jobs = append(q.jobs, &memJob{Claimed: Claimed{Job: j, ref: strconv.FormatUint(q.seq, 10)}})
	return nil
}

// Claim implements Queue.
func (q *MemoryQueue) Claim(ctx context.Context, consumer string) (Claimed, bool, error) {
	if err := ctx.Err(); err != nil {
		return Claimed{}, false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	pick := -1
	for i, j := range q.jobs {
		if j.holder != "" && !now.Before(j.until) {
			pick = i // a lapsed lease first
			break
		}
		if j.holder == "" && pick < 0 {
			pick = i
		}
	}
	if pick < 0 {
		return Claimed{}, false, nil
	}
	j := q.jobs[pick]
	j.holder, j.until = consumer, now.Add(q.lease)
	j.Attempt++
	return j.Claimed, true, nil
}

// Ack implements Queue.
func (q *MemoryQueue) Ack(ctx context.Context, c Claimed) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, j := range q.jobs {
		if j.ref == c.ref {
			q.jobs = append(q.jobs[:i], q.jobs[i+1:]...)
			return nil
		}
	}
	return ErrGone
}

// Len implements Queue.
func (q *MemoryQueue) Len(context.Context) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return int64(len(q.jobs)), nil
}

// ErrGone is an Ack of a job that is no longer in the queue (another
// agent took it over and finished it).
var ErrGone = errors.New("report: job is no longer queued")
