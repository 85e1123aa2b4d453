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

	"github.com/autodiag/autodiag/internal/redisstream"
)

// redisClient is what RedisOutbox uses of go-redis; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type redisClient interface {
	XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd
	XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd
	XPendingExt(ctx context.Context, a *redis.XPendingExtArgs) *redis.XPendingExtCmd
	XGroupCreateMkStream(ctx context.Context, stream, group, start string) *redis.StatusCmd
	XLen(ctx context.Context, stream string) *redis.IntCmd
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	redis.Scripter
}

var (
	//go:embed lua/claim_due.lua
	claimDueLua string
	// claimDueScript claims pending entries that are idle and due in one
	// step (see the script).
	claimDueScript = redis.NewScript(claimDueLua)
)

// RedisOptions configure a RedisOutbox; zero values mean the defaults.
type RedisOptions struct {
	// Prefix of the keys (redis.prefix, e.g. "autodiag:").
	Prefix    string
	ClaimIdle time.Duration    // DefaultClaimIdle
	DeadMax   int64            // DefaultDeadMax: the dead stream is capped (approximately) at this
	MaxLen    int64            // DefaultMaxLen: the outbox stream is capped (approximately) at this
	Clock     func() time.Time // time.Now; decides when a retry is due
}

// RedisOutbox is the Outbox of fleet mode. Keys, all with the hash tag
// {notify} so that one MULTI covers them on a Cluster:
//
//	<prefix>{notify}:outbox  stream of entries, consumer group "autodiag"
//	<prefix>{notify}:retry   hash: stream id → when its retry is due (ms)
//	<prefix>{notify}:dead    capped stream of given-up entries
//
// A pending entry is claimable once XPENDING shows it idle for ClaimIdle
// and its retry (if any) is due; Retry sets its idle to ClaimIdle, so the
// retry time alone holds it back, while an entry in flight is idle for
// less than ClaimIdle until its holder dies.
type RedisOutbox struct {
	c                   redisClient
	o                   RedisOptions
	stream, retry, dead string
	mu                  sync.Mutex
	cursor              string // where the next XPENDING scan starts
	grouped             bool   // the consumer group was made sure of
}

const redisGroup = redisstream.Group

var _ Outbox = (*RedisOutbox)(nil)

// NewRedisOutbox returns an outbox on c; it creates its consumer group on
// first use.
func NewRedisOutbox(c redisClient, o RedisOptions) *RedisOutbox {
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = DefaultClaimIdle
	}
	if o.DeadMax <= 0 {
		o.DeadMax = DefaultDeadMax
	}
	if o.MaxLen <= 0 {
		o.MaxLen = DefaultMaxLen
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	p := o.Prefix + "{notify}:"
	return &RedisOutbox{c: c, o: o, stream: p + "outbox", retry: p + "retry", dead: p + "dead", cursor: "-"}
}

// ClaimIdle implements Outbox.
func (r *RedisOutbox) ClaimIdle() time.Duration { return r.o.ClaimIdle }

// Enqueue implements Outbox: one XADD per entry, pipelined.
func (r *RedisOutbox) Enqueue(ctx context.Context, entries []Entry) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
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

// AddArgs is the XADD that writes e, for a caller that makes it itself
// (the state store, in the round trip of the task's final record); tell
// the Dispatcher with Enqueued once it landed.
func (r *RedisOutbox) AddArgs(e Entry) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: r.stream, MaxLen: r.o.MaxLen, Approx: true, Values: entryValues(e)}
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

// ensureGroup creates the consumer group (and the stream); reading from
// the start, so entries written before it are not skipped.
func (r *RedisOutbox) ensureGroup(ctx context.Context) error {
	if err := redisstream.CreateGroup(ctx, r.c, r.stream, redisGroup); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// maxScan bounds one XPENDING scan; successive Claims go on from where
// the last scan stopped, so retries waiting at the head cannot hide due
// ones behind them.
const maxScan = 256

// Claim implements Outbox. It returns an error wrapping ErrReset when it
// found the consumer group gone and created it again.
func (r *RedisOutbox) Claim(ctx context.Context, consumer string, max int, newWork bool) ([]Delivery, error) {
	if max <= 0 {
		return nil, nil
	}
	r.mu.Lock()
	grouped := r.grouped
	r.mu.Unlock()
	if !grouped {
		if err := r.ensureGroup(ctx); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.grouped = true
		r.mu.Unlock()
	}
	out, err := r.claimPending(ctx, consumer, max)
	if redisstream.IsNoGroup(err) {
		if err := r.ensureGroup(ctx); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("notify: claim: %w", ErrReset)
	}
	if err != nil {
		return nil, fmt.Errorf("notify: claim pending: %w", err)
	}
	if !newWork || len(out) >= max {
		return out, nil
	}
	res, err := r.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: redisGroup, Consumer: consumer,
		Streams: []string{r.stream, ">"}, Count: int64(max - len(out)), Block: -1}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return out, nil
	case redisstream.IsNoGroup(err):
		if err := r.ensureGroup(ctx); err != nil {
			return out, err
		}
		return out, fmt.Errorf("notify: claim: %w", ErrReset)
	case err != nil:
		return out, fmt.Errorf("notify: claim new: %w", err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, Delivery{Entry: parseEntry(m), Attempt: 1, ref: m.ID, consumer: consumer})
		}
	}
	return out, nil
}

func (r *RedisOutbox) claimPending(ctx context.Context, consumer string, max int) ([]Delivery, error) {
	r.mu.Lock()
	start := r.cursor
	r.mu.Unlock()
	pend, err := r.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.stream, Group: redisGroup,
		Idle: r.o.ClaimIdle, Start: start, End: "+", Count: maxScan}).Result()
	if err != nil {
		return nil, err
	}
	next := "-"
	if len(pend) == maxScan {
		next = "(" + pend[len(pend)-1].ID
	}
	r.mu.Lock()
	r.cursor = next
	r.mu.Unlock()
	if len(pend) == 0 {
		return nil, nil
	}
	ids := make([]string, len(pend))
	for i, p := range pend {
		ids[i] = p.ID
	}
	at, err := r.c.HMGet(ctx, r.retry, ids...).Result()
	if err != nil {
		return nil, err
	}
	// A first look at which are due, so that one claim asks for at most
	// max; claimDue looks again as it claims.
	now := r.o.Clock().UnixMilli()
	args := []any{redisGroup, consumer, r.o.ClaimIdle.Milliseconds(), now}
	attempts := map[string]int{}
	for i, p := range pend {
		if s, ok := at[i].(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > now {
				continue
			}
		}
		args = append(args, p.ID)
		attempts[p.ID] = int(p.RetryCount) + 1
		if len(attempts) == max {
			break
		}
	}
	if len(attempts) == 0 {
		return nil, nil
	}
	v, err := claimDueScript.Run(ctx, r.c, []string{r.stream, r.retry}, args...).Slice()
	if err != nil {
		return nil, err
	}
	var out []Delivery
	for _, e := range v {
		m, ok := scriptMessage(e)
		if !ok {
			return nil, fmt.Errorf("unexpected claim reply %v", e)
		}
		out = append(out, Delivery{Entry: parseEntry(m), Attempt: attempts[m.ID], ref: m.ID, consumer: consumer})
	}
	return out, nil
}

// scriptMessage is a stream entry as a script returns it: {id, {field,
// value, ...}}.
func scriptMessage(v any) (redis.XMessage, bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 2 {
		return redis.XMessage{}, false
	}
	id, ok := e[0].(string)
	fields, ok2 := e[1].([]any)
	if !ok || !ok2 || len(fields)%2 != 0 {
		return redis.XMessage{}, false
	}
	m := redis.XMessage{ID: id, Values: make(map[string]any, len(fields)/2)}
	for i := 0; i < len(fields); i += 2 {
		k, ok := fields[i].(string)
		if !ok {
			return redis.XMessage{}, false
		}
		m.Values[k] = fields[i+1]
	}
	return m, true
}

// Ack implements Outbox.
func (r *RedisOutbox) Ack(ctx context.Context, d Delivery) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.remove(ctx, p, d.ref)
		return nil
	})
	if err != nil {
		return fmt.Errorf("notify: ack %s: %w", d.ID, err)
	}
	return nil
}

// remove queues, on p, what takes the entry ref out of the outbox: its
// pending claim, its stream entry and its retry time.
func (r *RedisOutbox) remove(ctx context.Context, p redis.Pipeliner, ref string) {
	p.XAck(ctx, r.stream, redisGroup, ref)
	p.XDel(ctx, r.stream, ref)
	p.HDel(ctx, r.retry, ref)
}

// Retry implements Outbox: it records when the retry is due and sets the
// entry's idle time to ClaimIdle (XCLAIM … IDLE … JUSTID, which does not
// count as a delivery), so any agent claims it once it is due.
func (r *RedisOutbox) Retry(ctx context.Context, d Delivery, at time.Time) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.retry, d.ref, strconv.FormatInt(at.UnixMilli(), 10))
		p.Do(ctx, "XCLAIM", r.stream, redisGroup, d.consumer, 0, d.ref,
			"IDLE", r.o.ClaimIdle.Milliseconds(), "JUSTID")
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
		"died", strconv.FormatInt(r.o.Clock().UnixMilli(), 10))
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: r.dead, MaxLen: r.o.DeadMax, Approx: true, Values: vals})
		r.remove(ctx, p, d.ref)
		return nil
	})
	if err != nil {
		return fmt.Errorf("notify: dead-letter %s: %w", d.ID, err)
	}
	return nil
}

// Pending implements Outbox: the length of the outbox stream (acknowledged
// entries are deleted from it).
func (r *RedisOutbox) Pending(ctx context.Context) (int64, error) {
	n, err := r.c.XLen(ctx, r.stream).Result()
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
