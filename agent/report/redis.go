package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
)

// redisClient is what RedisQueue uses of go-redis; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type redisClient interface {
	streamq.Client
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// RedisQueue is the Queue of fleet mode: the stream
// <prefix>{report}:jobs with consumer group "autodiag", a work queue of
// agent/internal/streamq without retries. A job is claimed by one agent
// and removed (XACK+XDEL) once its report is written; a job whose holder
// has not acknowledged it for Lease is taken over by any agent.
type RedisQueue struct {
	c      redisClient
	q      *streamq.Queue
	maxLen int64
}

var (
	_ Queue   = (*RedisQueue)(nil)
	_ Shedder = (*RedisQueue)(nil)
)

// DefaultMaxLen caps the job stream: reports are optional work, and a
// fleet that cannot keep up ends the oldest jobs `skipped` (Shed) rather
// than spend Redis memory on them.
const DefaultMaxLen = 10000

// NewRedisQueue returns the queue under prefix (redis.prefix); lease 0 is
// DefaultLease.
func NewRedisQueue(c redisClient, prefix string, lease time.Duration) *RedisQueue {
	if lease <= 0 {
		lease = DefaultLease
	}
	return &RedisQueue{c: c, q: streamq.NewQueue(c, prefix+"{report}:jobs", "", lease), maxLen: DefaultMaxLen}
}

// Enqueue implements Queue: one XADD.
func (q *RedisQueue) Enqueue(ctx context.Context, j Job) error {
	a, err := q.AddArgs(j)
	if err != nil {
		return err
	}
	if err := q.c.XAdd(ctx, a).Err(); err != nil {
		return fmt.Errorf("report: enqueue %s: %w", j.ID, err)
	}
	return nil
}

// AddArgs is the XADD that queues j, for a caller that makes it itself
// (the state store, in the round trip of the task's final record); j is
// as Reporter.Prepare returns it, and Reporter.Kick follows once it landed.
func (q *RedisQueue) AddArgs(j Job) (*redis.XAddArgs, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("report: enqueue %s: %w", j.ID, err)
	}
	return &redis.XAddArgs{Stream: q.q.Stream(), Values: []any{"job", b}}, nil
}

// Shed implements Shedder: the oldest jobs past DefaultMaxLen, at most
// limit, leave the stream in one script and are returned for the
// Reporter to end `skipped`. The XADD of AddArgs trims nothing, since an
// XADD MAXLEN would delete jobs unseen. Jobs that cannot be read (no
// task to write a result into) are named in the error.
func (q *RedisQueue) Shed(ctx context.Context, limit int) ([]Job, error) {
	msgs, err := q.q.Shed(ctx, q.maxLen, "", 0, limit)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	out := make([]Job, 0, len(msgs))
	var bad []string
	for _, m := range msgs {
		var j Job
		s, _ := m.Values["job"].(string)
		if err := json.Unmarshal([]byte(s), &j); err != nil || j.ID == "" {
			bad = append(bad, m.ID)
			continue
		}
		out = append(out, j)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("report: shed %d unreadable jobs past the cap: %v", len(bad), bad)
	}
	return out, nil
}

// Claim implements Queue: a job whose holder's lease ended first, else a
// new one. A consumer group found gone (Redis restarted empty, or the key
// was removed) is made again and the claim tried once more.
func (q *RedisQueue) Claim(ctx context.Context, consumer string) (Claimed, bool, error) {
	got, err := q.q.Claim(ctx, consumer, 1, true, time.Now())
	if errors.Is(err, streamq.ErrGroupRecreated) && len(got) == 0 {
		got, err = q.q.Claim(ctx, consumer, 1, true, time.Now())
	}
	if err != nil && len(got) == 0 {
		return Claimed{}, false, fmt.Errorf("report: claim: %w", err)
	}
	if len(got) == 0 {
		return Claimed{}, false, nil
	}
	m := got[0]
	c := Claimed{Attempt: m.Attempt, ref: m.ID}
	s, _ := m.Values["job"].(string)
	if err := json.Unmarshal([]byte(s), &c.Job); err != nil {
		// An unreadable job can never be done: drop it rather than
		// have every agent take it over forever.
		_ = q.Ack(ctx, c)
		return Claimed{}, false, fmt.Errorf("report: job %s is unreadable, dropped: %w", m.ID, err)
	}
	return c, true, nil
}

// Ack implements Queue.
func (q *RedisQueue) Ack(ctx context.Context, c Claimed) error {
	var ack *redis.IntCmd
	_, err := q.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		ack = q.q.Remove(ctx, p, c.ref)
		return nil
	})
	if err != nil {
		return fmt.Errorf("report: ack %s: %w", c.ID, err)
	}
	if ack.Val() == 0 {
		return ErrGone
	}
	return nil
}

// Len implements Queue.
func (q *RedisQueue) Len(ctx context.Context) (int64, error) {
	n, err := q.q.Len(ctx)
	if err != nil {
		return 0, fmt.Errorf("report: queue length: %w", err)
	}
	return n, nil
}
