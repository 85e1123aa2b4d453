package streamq

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is what a Queue uses of go-redis; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type Client interface {
	XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd
	XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd
	XPendingExt(ctx context.Context, a *redis.XPendingExtArgs) *redis.XPendingExtCmd
	XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd
	XGroupCreateMkStream(ctx context.Context, stream, group, start string) *redis.StatusCmd
	XLen(ctx context.Context, stream string) *redis.IntCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	redis.Scripter
}

var (
	//go:embed lua/claim_due.lua
	claimDueLua string
	// claimDueScript claims pending entries that are idle and due in one
	// step (see the script).
	claimDueScript = redis.NewScript(claimDueLua)
	//go:embed lua/shed.lua
	shedLua string
	// shedScript moves the entries past a stream's cap to a dead stream
	// (see the script).
	shedScript = redis.NewScript(shedLua)
	//go:embed lua/retry.lua
	retryLua string
)

// ErrGroupRecreated says a claim found the consumer group gone (Redis
// restarted empty, or the key was removed) and created it again: entries
// the stream held are lost.
var ErrGroupRecreated = errors.New("streamq: consumer group was gone and is created again")

// Queue is a work queue on one Redis stream read by the consumer group
// Group. An entry is claimed by one consumer and stays pending under it
// until the caller removes it (Remove) or schedules a retry (Retry); a
// pending entry whose holder has not touched it for ClaimIdle is claimed
// by another consumer, and a scheduled one only once it is due. Keys:
//
//	Stream  the stream of entries
//	Retry   hash: stream id → when its retry is due (Unix ms); none for a
//	        queue whose entries are never retried (ClaimIdle is then a
//	        lease: only a holder's death gives its entry to another)
//
// Callers that need fairness between kinds of work (the notification
// sinks) give each kind its own Queue, so that one kind's backlog never
// stands in front of another's.
type Queue struct {
	c             Client
	stream, retry string
	claimIdle     time.Duration
	mu            sync.Mutex
	cursor        string // where the next XPENDING scan starts
	grouped       bool   // the consumer group was made sure of
}

// NewQueue returns the queue on stream with its retry hash (on a Cluster
// in the stream's slot: give both one hash tag); retry "" is a queue
// without retries, whose Retry may not be called. claimIdle is
// how long a claimed entry stays its holder's.
func NewQueue(c Client, stream, retry string, claimIdle time.Duration) *Queue {
	return &Queue{c: c, stream: stream, retry: retry, claimIdle: claimIdle, cursor: "-"}
}

// Stream is the key of the queue's stream.
func (q *Queue) Stream() string { return q.stream }

// Claimed is an entry a consumer claimed.
type Claimed struct {
	redis.XMessage
	// Attempt counts the claims of the entry, 1 for the first.
	Attempt int
}

// maxScan bounds one XPENDING scan; successive claims go on from where
// the last scan stopped, so retries waiting at the head cannot hide due
// ones behind them.
const maxScan = 256

// Claim returns at most max entries for consumer: pending entries whose
// retry is due (at now) or whose holder went quiet first, then new ones
// when newWork. It creates the group on first use; it returns an error
// wrapping ErrGroupRecreated (with what it claimed before) when it found
// the group gone.
func (q *Queue) Claim(ctx context.Context, consumer string, max int, newWork bool, now time.Time) ([]Claimed, error) {
	if max <= 0 {
		return nil, nil
	}
	q.mu.Lock()
	grouped := q.grouped
	q.mu.Unlock()
	if !grouped {
		if err := CreateGroup(ctx, q.c, q.stream, Group); err != nil {
			return nil, err
		}
		q.mu.Lock()
		q.grouped = true
		q.mu.Unlock()
	}
	out, err := q.claimPending(ctx, consumer, max, now)
	if IsNoGroup(err) {
		return nil, q.recreate(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("streamq: claim pending of %s: %w", q.stream, err)
	}
	if !newWork || len(out) >= max {
		return out, nil
	}
	res, err := q.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: consumer,
		Streams: []string{q.stream, ">"}, Count: int64(max - len(out)), Block: -1}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return out, nil
	case IsNoGroup(err):
		return out, q.recreate(ctx)
	case err != nil:
		return out, fmt.Errorf("streamq: claim new of %s: %w", q.stream, err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, Claimed{XMessage: m, Attempt: 1})
		}
	}
	return out, nil
}

func (q *Queue) recreate(ctx context.Context) error {
	if err := CreateGroup(ctx, q.c, q.stream, Group); err != nil {
		return err
	}
	return fmt.Errorf("%s: %w", q.stream, ErrGroupRecreated)
}

func (q *Queue) claimPending(ctx context.Context, consumer string, max int, now time.Time) ([]Claimed, error) {
	q.mu.Lock()
	start := q.cursor
	q.mu.Unlock()
	pend, err := q.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.stream, Group: Group,
		Idle: q.claimIdle, Start: start, End: "+", Count: maxScan}).Result()
	if err != nil {
		return nil, err
	}
	next := "-"
	if len(pend) == maxScan {
		next = "(" + pend[len(pend)-1].ID
	}
	q.mu.Lock()
	q.cursor = next
	q.mu.Unlock()
	if len(pend) == 0 {
		return nil, nil
	}
	if q.retry == "" {
		return q.claimIdleOnly(ctx, consumer, max, pend)
	}
	ids := make([]string, len(pend))
	for i, p := range pend {
		ids[i] = p.ID
	}
	at, err := q.c.HMGet(ctx, q.retry, ids...).Result()
	if err != nil {
		return nil, err
	}
	// A first look at which are due, so that one claim asks for at most
	// max; the script looks again as it claims.
	nowMs := now.UnixMilli()
	args := []any{Group, consumer, q.claimIdle.Milliseconds(), nowMs}
	attempts := map[string]int{}
	for i, p := range pend {
		if s, ok := at[i].(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > nowMs {
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
	v, err := claimDueScript.Run(ctx, q.c, []string{q.stream, q.retry}, args...).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]Claimed, 0, len(v))
	for _, e := range v {
		m, ok := scriptMessage(e)
		if !ok {
			return nil, fmt.Errorf("unexpected claim reply %v", e)
		}
		out = append(out, Claimed{XMessage: m, Attempt: attempts[m.ID]})
	}
	return out, nil
}

// claimIdleOnly claims, of pend, at most max entries still idle for
// ClaimIdle: without retry times there is nothing else to look at, and
// XCLAIM's min-idle alone keeps two consumers from both taking one.
func (q *Queue) claimIdleOnly(ctx context.Context, consumer string, max int, pend []redis.XPendingExt) ([]Claimed, error) {
	pend = pend[:min(max, len(pend))]
	ids := make([]string, len(pend))
	attempts := make(map[string]int, len(pend))
	for i, p := range pend {
		ids[i] = p.ID
		attempts[p.ID] = int(p.RetryCount) + 1
	}
	msgs, err := q.c.XClaim(ctx, &redis.XClaimArgs{Stream: q.stream, Group: Group, Consumer: consumer,
		MinIdle: q.claimIdle, Messages: ids}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Claimed, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, Claimed{XMessage: m, Attempt: attempts[m.ID]})
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

// Remove queues, on p, what takes entry id out of the queue: its pending
// claim, its stream entry and its retry time. The XACK it returns counts
// 0 once p ran when the entry was removed already (another consumer took
// it over and finished it).
func (q *Queue) Remove(ctx context.Context, p redis.Pipeliner, id string) *redis.IntCmd {
	ack := p.XAck(ctx, q.stream, Group, id)
	p.XDel(ctx, q.stream, id)
	if q.retry != "" {
		p.HDel(ctx, q.retry, id)
	}
	return ack
}

// Retry queues, on p, what leaves entry id (held by consumer) pending, to
// be claimed again at at by any consumer: its retry time, and its idle
// time set to ClaimIdle (XCLAIM … IDLE … JUSTID, which does not count as
// a delivery), so that the retry time alone holds it back. One script
// does both, and only while the entry is pending: an entry removed
// meanwhile leaves no retry time behind. The script goes in full (EVAL)
// because p may be a MULTI, where EVALSHA cannot fall back.
func (q *Queue) Retry(ctx context.Context, p redis.Pipeliner, consumer, id string, at time.Time) {
	p.Eval(ctx, retryLua, []string{q.stream, q.retry}, Group, consumer, q.claimIdle.Milliseconds(), id,
		strconv.FormatInt(at.UnixMilli(), 10))
}

// Len is the length of the stream: removed entries are deleted from it.
func (q *Queue) Len(ctx context.Context) (int64, error) {
	n, err := q.c.XLen(ctx, q.stream).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: length of %s: %w", q.stream, err)
	}
	return n, nil
}

// Shed moves the oldest entries past maxLen, at most limit of them, out
// of the queue and returns them; with a dead stream (dead not "") it
// also copies each there (the stream capped approximately at deadMax),
// with the field, value pairs of extra appended. Nothing is dropped
// without the caller seeing it: it ends, counts and logs what Shed
// returns. An entry in flight (claimed less than ClaimIdle ago and not
// scheduled for a retry) is left to its holder, so that it never ends
// both done and dead-lettered; the oldest entries after it go instead.
func (q *Queue) Shed(ctx context.Context, maxLen int64, dead string, deadMax int64, limit int, extra ...any) ([]redis.XMessage, error) {
	keys := []string{q.stream}
	hasRetry := "0"
	if q.retry != "" {
		keys, hasRetry = append(keys, q.retry), "1"
	}
	if dead == "" {
		deadMax = 0
	} else {
		keys = append(keys, dead)
	}
	args := append([]any{Group, maxLen, limit, hasRetry, deadMax, q.claimIdle.Milliseconds()}, extra...)
	v, err := shedScript.Run(ctx, q.c, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("streamq: shed %s: %w", q.stream, err)
	}
	out := make([]redis.XMessage, 0, len(v))
	for _, e := range v {
		m, ok := scriptMessage(e)
		if !ok {
			return nil, fmt.Errorf("streamq: shed %s: unexpected reply %v", q.stream, e)
		}
		out = append(out, m)
	}
	return out, nil
}
