package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
)

// redisClient is what RedisQueue uses of go-redis; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type redisClient interface {
	XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd
	XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd
	XAutoClaim(ctx context.Context, a *redis.XAutoClaimArgs) *redis.XAutoClaimCmd
	XGroupCreateMkStream(ctx context.Context, stream, group, start string) *redis.StatusCmd
	XLen(ctx context.Context, stream string) *redis.IntCmd
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// RedisQueue is the Queue of fleet mode: the stream
// <prefix>{report}:jobs with consumer group "autodiag". A job is claimed
// with XREADGROUP, removed with XACK+XDEL, and a job whose holder has not
// acknowledged it for Lease is taken over with XAUTOCLAIM by any agent.
type RedisQueue struct {
	c       redisClient
	stream  string
	lease   time.Duration
	maxLen  int64
	mu      sync.Mutex
	grouped bool
	// cursor is where the next XAUTOCLAIM scan starts: each scans a
	// bounded part of the pending list, so successive claims go round
	// it and a dead holder's job behind many live ones is still found.
	cursor string
}

var _ Queue = (*RedisQueue)(nil)

const redisGroup = streamq.Group

// DefaultMaxLen caps the job stream (approximately): reports are optional
// work, and a fleet that cannot keep up loses the oldest jobs rather than
// Redis memory.
const DefaultMaxLen = 10000

// NewRedisQueue returns the queue under prefix (redis.prefix); lease 0 is
// DefaultLease.
func NewRedisQueue(c redisClient, prefix string, lease time.Duration) *RedisQueue {
	if lease <= 0 {
		lease = DefaultLease
	}
	return &RedisQueue{c: c, stream: prefix + "{report}:jobs", lease: lease, maxLen: DefaultMaxLen}
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
	return &redis.XAddArgs{Stream: q.stream, MaxLen: q.maxLen, Approx: true, Values: []any{"job", b}}, nil
}

func (q *RedisQueue) ensureGroup(ctx context.Context, force bool) error {
	q.mu.Lock()
	done := q.grouped
	q.mu.Unlock()
	if done && !force {
		return nil
	}
	if err := streamq.CreateGroup(ctx, q.c, q.stream, redisGroup); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	q.mu.Lock()
	q.grouped = true
	q.mu.Unlock()
	return nil
}

// Claim implements Queue.
func (q *RedisQueue) Claim(ctx context.Context, consumer string) (Claimed, bool, error) {
	if err := q.ensureGroup(ctx, false); err != nil {
		return Claimed{}, false, err
	}
	c, ok, err := q.claim(ctx, consumer)
	if streamq.IsNoGroup(err) { // Redis restarted empty or the key was removed
		if err := q.ensureGroup(ctx, true); err != nil {
			return Claimed{}, false, err
		}
		c, ok, err = q.claim(ctx, consumer)
	}
	return c, ok, err
}

func (q *RedisQueue) claim(ctx context.Context, consumer string) (Claimed, bool, error) {
	q.mu.Lock()
	start := q.cursor
	q.mu.Unlock()
	if start == "" {
		start = "0"
	}
	msgs, next, err := q.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: q.stream, Group: redisGroup,
		Consumer: consumer, MinIdle: q.lease, Start: start, Count: 1}).Result()
	if err != nil {
		return Claimed{}, false, fmt.Errorf("report: claim pending: %w", err)
	}
	q.mu.Lock()
	q.cursor = next // "0-0" when the scan reached the end: start over
	q.mu.Unlock()
	attempt := 2 // taken over: at least the second claim
	if len(msgs) == 0 {
		res, err := q.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: redisGroup, Consumer: consumer,
			Streams: []string{q.stream, ">"}, Count: 1, Block: -1}).Result()
		if errors.Is(err, redis.Nil) {
			return Claimed{}, false, nil
		}
		if err != nil {
			return Claimed{}, false, fmt.Errorf("report: claim new: %w", err)
		}
		for _, s := range res {
			msgs = append(msgs, s.Messages...)
		}
		attempt = 1
	}
	if len(msgs) == 0 {
		return Claimed{}, false, nil
	}
	m := msgs[0]
	c := Claimed{Attempt: attempt, ref: m.ID}
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
		ack = p.XAck(ctx, q.stream, redisGroup, c.ref)
		p.XDel(ctx, q.stream, c.ref)
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
	n, err := q.c.XLen(ctx, q.stream).Result()
	if err != nil {
		return 0, fmt.Errorf("report: queue length: %w", err)
	}
	return n, nil
}
