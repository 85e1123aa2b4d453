package notify

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/rediswait"
)

// redisClient is what RedisOutbox uses of go-redis; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type redisClient interface {
	streamq.Client
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

var (
	//go:embed lua/migrate_legacy.lua
	migrateLegacyLua string
	// migrateLegacyScript moves entries of the single stream of earlier
	// versions into their sinks' streams (see the script).
	migrateLegacyScript = redis.NewScript(migrateLegacyLua)
)

// legacyBatch bounds the entries one MigrateLegacy call looks at.
const legacyBatch = 1000

// MigrateLegacy moves the entries of the single outbox stream of earlier
// versions (<prefix>{notify}:outbox) that belong to one of sinks into
// their sinks' streams, and returns how many it moved. An agent calls it
// once per poll: during a rolling upgrade, agents of the earlier version
// still write there. A moved entry that an earlier agent was sending may
// be delivered twice (receivers dedupe by delivery id).
func (r *RedisOutbox) MigrateLegacy(ctx context.Context, sinks []string) (int, error) {
	if len(sinks) == 0 {
		return 0, nil
	}
	keys := []string{r.prefix + "outbox", r.prefix + "retry"}
	args := []any{legacyBatch}
	for _, s := range sinks {
		keys = append(keys, r.queue(s).Stream())
		args = append(args, s)
	}
	n, err := migrateLegacyScript.Run(ctx, r.c, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("notify: move entries of the earlier outbox stream: %w", err)
	}
	return n, nil
}

// RedisOptions configure a RedisOutbox; zero values mean the defaults.
type RedisOptions struct {
	// Prefix of the keys (redis.prefix, e.g. "autodiag:").
	Prefix    string
	ClaimIdle time.Duration // DefaultClaimIdle
	DeadMax   int64         // DefaultDeadMax: the dead stream is capped (approximately) at this
	MaxLen    int64         // DefaultMaxLen: each sink's stream is capped at this; Shed dead-letters the excess
	Clock     clock.Clock   // nil: the wall clock; decides when a retry is due
}

// RedisOutbox is the Outbox of fleet mode. Each sink has its own work
// queue (streamq.Queue), so that one sink's retries and backlog never
// stand in front of another's. Keys, all with the hash tag {notify} so
// that one MULTI covers them on a Cluster:
//
//	<prefix>{notify}:outbox:<sink>  stream of the sink's entries, consumer group "autodiag"
//	<prefix>{notify}:retry:<sink>   hash: stream id → when its retry is due (ms)
//	<prefix>{notify}:dead           capped stream of given-up entries
//
// A pending entry is claimable once XPENDING shows it idle for ClaimIdle
// and its retry (if any) is due; Retry sets its idle to ClaimIdle, so the
// retry time alone holds it back, while an entry in flight is idle for
// less than ClaimIdle until its holder dies.
type RedisOutbox struct {
	c      redisClient
	o      RedisOptions
	prefix string
	dead   string
	mu     sync.Mutex
	queues map[string]*streamq.Queue // by sink
	// waiter: c cuts a call at its context's deadline itself; otherwise
	// Enqueue waits for its reply at most until its context ends
	// (rediswait), as its callers on a task's or a drain's path expect.
	waiter rediswait.Waiter
}

var _ Outbox = (*RedisOutbox)(nil)

// NewRedisOutbox returns an outbox on c; it creates the consumer group of
// a sink's stream on first use.
func NewRedisOutbox(c redisClient, o RedisOptions) *RedisOutbox {
	withOutboxDefaults(&o.ClaimIdle, &o.DeadMax, &o.MaxLen, &o.Clock)
	p := o.Prefix + "{notify}:"
	return &RedisOutbox{c: c, o: o, prefix: p, dead: p + "dead", queues: map[string]*streamq.Queue{},
		waiter: rediswait.For(c)}
}

// queue is the work queue of sink.
func (r *RedisOutbox) queue(sink string) *streamq.Queue {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.queues[sink]
	if !ok {
		q = streamq.NewQueue(r.c, r.prefix+"outbox:"+sink, r.prefix+"retry:"+sink, r.o.ClaimIdle)
		r.queues[sink] = q
	}
	return q
}

// ClaimIdle implements Outbox.
func (r *RedisOutbox) ClaimIdle() time.Duration { return r.o.ClaimIdle }

// MaxLen implements Outbox.
func (r *RedisOutbox) MaxLen() int64 { return r.o.MaxLen }

// Enqueue implements Outbox: one XADD per entry, pipelined.
func (r *RedisOutbox) Enqueue(ctx context.Context, entries []Entry) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	refs, err := rediswait.Do(ctx, r.waiter, func(ctx context.Context) ([]string, error) {
		var cmds []*redis.StringCmd
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmds = r.AddTo(ctx, p, entries)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("notify: enqueue: %w", err)
		}
		refs := make([]string, len(cmds))
		for i, c := range cmds {
			refs[i] = c.Val()
		}
		return refs, nil
	})
	if errors.Is(err, rediswait.ErrNoReply) {
		err = fmt.Errorf("notify: enqueue: %w", err)
	}
	return refs, err
}

// AddTo queues the XADDs of entries on p, for a caller that writes them in
// the same pipeline as the task's final record.
func (r *RedisOutbox) AddTo(ctx context.Context, p redis.Pipeliner, entries []Entry) []*redis.StringCmd {
	cmds := make([]*redis.StringCmd, len(entries))
	for i, e := range entries {
		cmds[i] = p.XAdd(ctx, r.AddArgs(e))
	}
	return cmds
}

// AddArgs is the XADD that writes e to its sink's stream, for a caller
// that makes it itself (the state store, in the round trip of the task's
// final record); tell the Dispatcher with Enqueued once it landed. It
// trims nothing: an XADD MAXLEN would delete undelivered entries unseen,
// so the cap is kept by Shed, which dead-letters what it removes.
func (r *RedisOutbox) AddArgs(e Entry) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: r.queue(e.Sink).Stream(), Values: entryValues(e)}
}

func entryValues(e Entry) []any {
	return []any{"id", e.ID, "sink", e.Sink, "event", string(e.Event), "origin", e.Origin,
		"time", strconv.FormatInt(e.Time.UnixMilli(), 10), "body", e.Body}
}

func parseEntry(m redis.XMessage) Entry {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	ms, _ := strconv.ParseInt(s("time"), 10, 64)
	return Entry{ID: s("id"), Sink: s("sink"), Event: EventType(s("event")), Origin: s("origin"),
		Time: time.UnixMilli(ms), Body: []byte(s("body"))}
}

// Claim implements Outbox. It returns an error wrapping ErrReset when it
// found the sink's consumer group gone and created it again.
func (r *RedisOutbox) Claim(ctx context.Context, consumer, sink string, max int, newWork bool) ([]Delivery, error) {
	got, err := r.queue(sink).Claim(ctx, consumer, max, newWork, r.o.Clock.Now())
	out := make([]Delivery, 0, len(got))
	for _, c := range got {
		out = append(out, Delivery{Entry: parseEntry(c.XMessage), Attempt: c.Attempt, ref: c.ID, consumer: consumer})
	}
	if errors.Is(err, streamq.ErrGroupRecreated) {
		return out, fmt.Errorf("notify: claim %s: %w: %w", sink, ErrReset, err)
	}
	if err != nil {
		return out, fmt.Errorf("notify: claim %s: %w", sink, err)
	}
	return out, nil
}

// Shed implements Outbox: the oldest entries past MaxLen move to the dead
// stream in one script each call (streamq.Queue.Shed). An entry in
// flight (claimed less than ClaimIdle ago, not waiting for a retry) is
// skipped: its holder delivers it, retries it or dead-letters it, so it
// never ends both delivered and dead-lettered.
func (r *RedisOutbox) Shed(ctx context.Context, sink string, limit int) ([]DeadEntry, error) {
	died := r.o.Clock.Now()
	msgs, err := r.queue(sink).Shed(ctx, r.o.MaxLen, r.dead, r.o.DeadMax, limit,
		"attempts", 0, "reason", ReasonOutboxFull, "died", strconv.FormatInt(died.UnixMilli(), 10))
	if err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	out := make([]DeadEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, DeadEntry{Entry: parseEntry(m), Reason: ReasonOutboxFull, DiedAt: died})
	}
	return out, nil
}

// Ack implements Outbox.
func (r *RedisOutbox) Ack(ctx context.Context, d Delivery) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.queue(d.Sink).Remove(ctx, p, d.ref)
		return nil
	})
	if err != nil {
		return fmt.Errorf("notify: ack %s: %w", d.ID, err)
	}
	return nil
}

// Retry implements Outbox (streamq.Queue.Retry): any agent claims
// the entry once it is due.
func (r *RedisOutbox) Retry(ctx context.Context, d Delivery, at time.Time) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.queue(d.Sink).Retry(ctx, p, d.consumer, d.ref, at)
		return nil
	})
	if err != nil {
		return fmt.Errorf("notify: schedule retry of %s: %w", d.ID, err)
	}
	return nil
}

// Dead implements Outbox.
func (r *RedisOutbox) Dead(ctx context.Context, d Delivery, reason string) error {
	vals := append(entryValues(d.Entry), "attempts", d.Attempt, "reason", reason,
		"died", strconv.FormatInt(r.o.Clock.Now().UnixMilli(), 10))
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: r.dead, MaxLen: r.o.DeadMax, Approx: true, Values: vals})
		r.queue(d.Sink).Remove(ctx, p, d.ref)
		return nil
	})
	if err != nil {
		return fmt.Errorf("notify: dead-letter %s: %w", d.ID, err)
	}
	return nil
}

// Pending implements Outbox: the length of the sink's stream
// (acknowledged entries are deleted from it).
func (r *RedisOutbox) Pending(ctx context.Context, sink string) (int64, error) {
	n, err := r.queue(sink).Len(ctx)
	if err != nil {
		return 0, fmt.Errorf("notify: pending: %w", err)
	}
	return n, nil
}

// ListDead implements Outbox.
func (r *RedisOutbox) ListDead(ctx context.Context, max int) ([]DeadEntry, error) {
	msgs, err := r.c.XRevRangeN(ctx, r.dead, "+", "-", int64(max)).Result()
	if err != nil {
		return nil, fmt.Errorf("notify: list dead: %w", err)
	}
	out := make([]DeadEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, parseDead(m))
	}
	return out, nil
}

func parseDead(m redis.XMessage) DeadEntry {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	n, _ := strconv.Atoi(s("attempts"))
	ms, _ := strconv.ParseInt(s("died"), 10, 64)
	return DeadEntry{Entry: parseEntry(m), Attempts: n, Reason: s("reason"), DiedAt: time.UnixMilli(ms), Ref: m.ID}
}

// Requeue implements Outbox. Each entry is read, then written back and
// removed from the dead stream in one MULTI; two operators requeuing the
// same entry at once can deliver it twice (receivers dedupe by id).
func (r *RedisOutbox) Requeue(ctx context.Context, refs []string) (int, error) {
	n := 0
	for _, ref := range refs {
		var rng *redis.XMessageSliceCmd
		if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			rng = p.XRangeN(ctx, r.dead, ref, ref, 1)
			return nil
		}); err != nil {
			return n, fmt.Errorf("notify: requeue %s: %w", ref, err)
		}
		if len(rng.Val()) == 0 {
			continue
		}
		e := parseEntry(rng.Val()[0])
		if _, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			r.AddTo(ctx, p, []Entry{e})
			p.XDel(ctx, r.dead, ref)
			return nil
		}); err != nil {
			return n, fmt.Errorf("notify: requeue %s: %w", ref, err)
		}
		n++
	}
	return n, nil
}
