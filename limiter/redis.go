package limiter

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/rediswait"
)

//go:embed allow.lua
var allowLua string

//go:embed held.lua
var heldLua string

// allowScript runs allow.lua, heldScript held.lua: EVALSHA, and EVAL when
// the server does not have the script cached (a restarted or failed-over
// Redis).
var (
	allowScript = redis.NewScript(allowLua)
	heldScript  = redis.NewScript(heldLua)
)

var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
	_ redis.Scripter = (*redis.Ring)(nil)
	_ redis.Scripter = (*redis.AutoPipeliner)(nil)
	_ redis.Scripter = redis.UniversalClient(nil)
)

// Redis is the shared backend: one decision is one run of allow.lua through
// go-redis's Script.Run, on the client as it is; a client that batches on
// its own (client.AutoPipeline()) fits as well.
//
// Script.Run is the transport because nothing cleverer pays on the
// agent's workload. The agent makes at most `workers` decisions at once
// (default 4), each followed by a diagnostic run of seconds, so a
// coalescer that batches decisions beyond eight in flight never engages;
// pooled call buffers aliased as strings through unsafe save allocations
// (a full-rule decision makes 26 with Script.Run, redis_rate 22) but no
// measurable time. scripts/bench, plain mode, full-rule decisions/s over redis_rate
// Allow/s on the same client (above 1: the limiter is faster), one run of
// each transport on 2 shared cores:
//
//	goroutines   pooled+coalescing   Script.Run
//	1            0.92                0.89
//	8            0.89                0.96
//	64           1.18                1.20   (no agent reaches this)
type Redis struct {
	c      redis.Scripter
	prefix string
	// waiter: direct when c turns a context deadline into its pool-wait,
	// dial, read and write deadlines, so a call can run on the caller's
	// goroutine; else the goroutines a call's reply is read on.
	waiter rediswait.Waiter
	// logMax is the largest window count kept as a log in the rule's state
	// string; a larger window is a sorted set of its own. The log costs a
	// copy of every entry per decision (about 10 µs more per 100 entries
	// on a small machine), the sorted set about 5 µs more whatever its
	// size (ZCOUNT, ZREMRANGEBYSCORE, ZADD, PEXPIRE).
	logMax int
	// split: the client routes by key (Cluster, Ring), so one call's keys
	// must share a hash tag; rules under other tags are calls of their own.
	split bool
	calls atomic.Int64 // allow.lua runs, for tests and the bench
}

var _ Backend = (*Redis)(nil)

// defaultWindowLogMax is Redis.logMax unless a test sets it (0 puts every
// window in a sorted set).
const defaultWindowLogMax = 64

// NewRedis returns a backend storing state under keys starting with prefix
// (redis.prefix, e.g. "autodiag:") in the Redis that client talks to. Any
// go-redis client fits: Client, ClusterClient, Ring, failover clients, and
// the client's AutoPipeline(), which batches concurrent decisions into
// pipelines (still one EVALSHA per decision).
//
// The limiter bounds each call by Options.Timeout. A *redis.Client,
// *redis.ClusterClient or *redis.Ring with ContextTimeoutEnabled turns a
// context deadline into its pool-wait, dial, read and write deadlines, so the
// call runs on the caller's goroutine under a deadline; with any other
// client (or without that option) the call runs on a goroutine of its own
// that the decision stops waiting for at the timeout, and that reads the
// reply when it comes (see internal/rediswait).
func NewRedis(client redis.Scripter, prefix string) *Redis {
	b := &Redis{c: client, prefix: prefix, waiter: rediswait.For(client), logMax: defaultWindowLogMax}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		b.split = true
	}
	return b
}

// ErrBadReply means the script's reply could not be understood.
var ErrBadReply = errors.New("limiter: unexpected reply from allow.lua")

// errTimeout is the cause of a decision that waited longer than the timeout.
var errTimeout = errors.New("timed out")

func (b *Redis) eval(parent context.Context, o *op, timeout time.Duration) (result, error) {
	if b.split {
		if err := b.countInService(parent, o, timeout); err != nil {
			return result{}, err
		}
	}
	if !b.split || len(o.rules) < 2 {
		keys, args := b.encode(o, o.rules)
		return b.call(parent, timeout, keys, args, o.results(len(o.rules)))
	}
	// On a Cluster (or Ring) a call's keys must share a slot: the rules
	// under the enforced rule's tag go with it, every other tag costs one
	// call more, after the first, told whether the task runs.
	res := result{rules: make([]ruleResult, len(o.rules))}
	tags := make([]string, 0, 2)
	for _, r := range o.rules {
		if !slices.Contains(tags, r.tag) {
			tags = append(tags, r.tag)
		}
	}
	sub := *o
	for gi, tag := range tags {
		var idx []int
		group := make([]ruleOp, 0, len(o.rules))
		for i := range o.rules {
			if o.rules[i].tag == tag {
				idx = append(idx, i)
				group = append(group, o.rules[i])
			}
		}
		if gi > 0 {
			sub.dedupeID, sub.dedupeTTL, sub.enforced = "", 0, false
		}
		keys, args := b.encode(&sub, group)
		r, err := b.call(parent, timeout, keys, args, make([]ruleResult, len(group)))
		if err != nil {
			return result{}, err
		}
		if gi == 0 {
			if r.rules[0].status == statusDuplicate {
				return r, nil
			}
			sub.runs = !o.enforced || r.rules[0].status == statusAllowed
			if !o.enforced {
				sub.runs = o.runs
			}
		}
		for k, i := range idx {
			res.rules[i] = r.rules[k]
		}
	}
	return res, nil
}

// countInService counts, ahead of the decision, the agents in service of
// every max_percent rule of o: on a Cluster the in-service set is in
// another slot than the rule's keys, so it costs one ZCOUNT more (the
// script reads it itself on a single server).
func (b *Redis) countInService(parent context.Context, o *op, timeout time.Duration) error {
	for i := range o.rules {
		r := &o.rules[i]
		if r.concPct == 0 {
			continue
		}
		n, err := bounded(parent, timeout, b.waiter, "zcount", func(ctx context.Context) (int64, error) {
			c, ok := b.c.(redis.Cmdable)
			if !ok {
				return 0, fmt.Errorf("count agents in service: client %T cannot run plain commands", b.c)
			}
			n, err := c.ZCount(ctx, b.prefix+r.inSvc, "("+strconv.FormatInt(o.now/1000, 10), "+inf").Result()
			if err != nil {
				return 0, fmt.Errorf("redis zcount %s: %w", b.prefix+r.inSvc, err)
			}
			return n, nil
		})
		if err != nil {
			return err
		}
		r.agents = n
	}
	return nil
}

// call runs allow.lua with keys and args under timeout and parses a reply
// of len(dst) rules into dst.
func (b *Redis) call(parent context.Context, timeout time.Duration, keys []string, args []any, dst []ruleResult) (result, error) {
	b.calls.Add(1)
	run := func(ctx context.Context) (result, error) {
		reply, err := allowScript.Run(ctx, b.c, keys, args...).Text()
		if err != nil {
			return result{}, fmt.Errorf("redis evalsha allow.lua: %w", err)
		}
		return parseReply(reply, dst)
	}
	return bounded(parent, timeout, b.waiter, "allow.lua", run)
}

// bounded runs f under timeout: on the caller's goroutine when the client
// honours deadlines (w is direct), else on another goroutine (one of w's)
// that is abandoned at the timeout. A call that timed out after more than ten
// times the timeout timed out because this process did not run (stopped, or
// starved of CPU), not because of Redis: it is made once more before the
// timeout counts as an outage (the breaker, the fail mode). Had the first
// call run on the server, the decision is taken twice: what it consumes
// (quota, window) is counted twice, on the side of caution.
func bounded[T any](parent context.Context, timeout time.Duration, w rediswait.Waiter, script string, f func(context.Context) (T, error)) (T, error) {
	if timeout <= 0 {
		return f(parent)
	}
	start := time.Now()
	res, err := boundedOnce(parent, timeout, w, script, f)
	if errors.Is(err, errTimeout) && clock.Stopped(start, timeout) {
		res, err = boundedOnce(parent, timeout, w, script, f)
	}
	return res, err
}

// ended is ctx's error, or DeadlineExceeded when its deadline has passed
// and its timer has not yet said so (a process resumed after a stop meets
// every deadline at once, in any order); nil while ctx lives.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func boundedOnce[T any](parent context.Context, timeout time.Duration, w rediswait.Waiter, script string, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	res, err := rediswait.Do(ctx, w, f)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		var zero T
		if perr := ended(parent); perr != nil {
			// The caller's end, not our timeout: not a Redis outage.
			return zero, fmt.Errorf("redis evalsha %s: %w", script, perr)
		}
		return zero, fmt.Errorf("redis evalsha %s: %w after %s: %w", script, errTimeout, timeout, err)
	}
	return res, err
}

func (b *Redis) key(tag, kind, rule string) string {
	return b.prefix + "lim:{" + tag + "}:" + kind + rule
}

// encode returns the KEYS, in allow.lua's order, and ARGV of a call for
// rules (o.rules, or a group of them sharing a tag).
func (b *Redis) encode(o *op, rules []ruleOp) ([]string, []any) {
	keys := make([]string, 0, 1+2*len(rules))
	if o.dedupeID != "" {
		keys = append(keys, b.prefix+"lim:{"+rules[0].tag+"}:dd:"+o.host+":"+o.diag+":"+o.dedupeID)
	}
	args := make([]any, 3, 3+2*len(rules))
	// One buffer for the header and every rule's parameters.
	packed := make([]byte, 7*8, 7*8+17*8*len(rules))
	for i := range rules {
		r := &rules[i]
		hs, wz := int64(0), int64(0)
		if r.hasState() {
			keys = append(keys, b.key(r.tag, "s:", r.rule))
			hs = 1
		}
		if r.winCount > b.logMax {
			keys = append(keys, b.key(r.tag, "w:", r.rule))
			wz = 1
		}
		if r.conc > 0 {
			keys = append(keys, b.key(r.tag, "c:", r.rule+r.slotSuffix))
			if r.concPct > 0 && r.agents < 0 {
				keys = append(keys, b.prefix+r.inSvc)
			}
		}
		if r.brkFail > 0 {
			keys = append(keys, b.key(r.tag, "f:", r.rule))
		}
		start := len(packed)
		for _, v := range [...]int64{r.block, int64(r.daily), r.dayNum, r.dailyTTL, r.minIvl, int64(r.winCount),
			r.winPer, r.rateT, int64(r.rateCap), wz, hs, int64(r.conc), int64(r.brkFail), r.brkWin, r.brkOpen,
			r.concPct, r.agents} {
			packed = binary.LittleEndian.AppendUint64(packed, uint64(v))
		}
		order := r.order
		if order == "" {
			order = "-"
		}
		args = append(args, packed[start:len(packed):len(packed)], order)
	}
	for i, v := range [...]int64{b2i(o.dry), o.now, o.dedupeTTL, int64(len(rules)), o.leaseUntil, b2i(o.enforced), b2i(o.runs)} {
		binary.LittleEndian.PutUint64(packed[i*8:], uint64(v))
	}
	args[0], args[1], args[2] = packed[:7*8:7*8], o.task, strconv.FormatUint(o.member, 10)
	return keys, args
}

func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// replyRecord is the size of one rule's record in allow.lua's reply.
const replyRecord = 11 * 8

// parseReply parses allow.lua's reply into dst: len(dst) records of 11
// little-endian int64 (1 for a duplicate).
func parseReply(s string, dst []ruleResult) (result, error) {
	n := len(dst)
	if len(s) == 0 || len(s)%replyRecord != 0 || (len(s) != n*replyRecord && len(s) != replyRecord) {
		return result{}, fmt.Errorf("%w: %d bytes for %d rules", ErrBadReply, len(s), n)
	}
	res := result{rules: dst[:len(s)/replyRecord]}
	for k := range res.rules {
		f := func(i int) int64 {
			j := k*replyRecord + i*8
			return int64(binary.LittleEndian.Uint64([]byte(s[j : j+8])))
		}
		res.rules[k] = ruleResult{status: int(f(0)), limit: byte(f(1)), retry: f(2), dailyUsed: f(3), since: f(4),
			winCount: f(5), level: f(6), holders: f(7), probe: f(8) == 1, concLimit: f(9), agents: f(10)}
	}
	if len(res.rules) != n && res.rules[0].status != statusDuplicate {
		return result{}, fmt.Errorf("%w: %d records for %d rules", ErrBadReply, len(res.rules), n)
	}
	return res, nil
}

// held runs held.lua, one call per tag on a Cluster.
func (b *Redis) held(ctx context.Context, h *heldOp, timeout time.Duration) error {
	for _, c := range b.heldCalls(h) {
		_, err := bounded(ctx, timeout, b.waiter, "held.lua", func(ctx context.Context) (int64, error) {
			n, err := c.Script.Run(ctx, b.c, c.Keys, c.Args...).Int64()
			if err != nil {
				return 0, fmt.Errorf("redis evalsha held.lua: %w", err)
			}
			return n, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// heldCalls is held as the held.lua calls it makes: one, or one per tag
// on a Cluster.
func (b *Redis) heldCalls(h *heldOp) []ScriptCall {
	groups := [][]ruleOp{h.rules}
	if b.split && len(h.rules) > 1 {
		groups = groups[:0]
		var tags []string
		for _, r := range h.rules {
			if !slices.Contains(tags, r.tag) {
				tags = append(tags, r.tag)
			}
		}
		for _, tag := range tags {
			var g []ruleOp
			for _, r := range h.rules {
				if r.tag == tag {
					g = append(g, r)
				}
			}
			groups = append(groups, g)
		}
	}
	calls := make([]ScriptCall, 0, len(groups))
	for _, g := range groups {
		var keys []string
		args := make([]any, 2, 2+len(g))
		for i := range g {
			r := &g[i]
			conc := int64(0)
			if r.conc > 0 {
				keys = append(keys, b.key(r.tag, "c:", r.rule+r.slotSuffix))
				conc = 1
			}
			if r.brkFail > 0 {
				keys = append(keys, b.key(r.tag, "f:", r.rule))
			}
			packed := make([]byte, 0, 4*8)
			for _, v := range [...]int64{conc, int64(r.brkFail), r.brkWin, r.brkOpen} {
				packed = binary.LittleEndian.AppendUint64(packed, uint64(v))
			}
			args = append(args, packed)
		}
		header := make([]byte, 0, 5*8)
		for _, v := range [...]int64{h.now, b2i(h.done), int64(h.outcome), h.leaseUntil, int64(len(g))} {
			header = binary.LittleEndian.AppendUint64(header, uint64(v))
		}
		args[0], args[1] = header, h.task
		calls = append(calls, ScriptCall{Script: heldScript, Source: heldLua, Keys: keys, Args: args})
	}
	return calls
}

// inspect reads one rule's slots and breaker for tag.
func (b *Redis) inspect(ctx context.Context, tag string, r *ruleOp, now int64, timeout time.Duration) (ruleState, error) {
	return bounded(ctx, timeout, b.waiter, "inspect", func(ctx context.Context) (ruleState, error) {
		var st ruleState
		c, ok := b.c.(redis.Cmdable)
		if !ok {
			return st, fmt.Errorf("inspect: client %T cannot run plain commands", b.c)
		}
		if r.conc > 0 {
			zs, err := c.ZRangeByScoreWithScores(ctx, b.key(tag, "c:", r.rule+r.slotSuffix),
				&redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
			if err != nil {
				return st, fmt.Errorf("redis zrangebyscore: %w", err)
			}
			for _, z := range zs {
				st.holders = append(st.holders, Holder{TaskID: fmt.Sprint(z.Member), Expires: time.UnixMicro(int64(z.Score))})
			}
		}
		if r.brkFail > 0 {
			v, err := c.HMGet(ctx, b.key(tag, "f:", r.rule), "o", "p", "pu", "f").Result()
			if err != nil {
				return st, fmt.Errorf("redis hmget: %w", err)
			}
			str := func(i int) string { s, _ := v[i].(string); return s }
			st.openUntil, _ = strconv.ParseInt(str(0), 10, 64)
			st.probe = str(1)
			st.probeUntil, _ = strconv.ParseInt(str(2), 10, 64)
			f := []byte(str(3))
			for i := 0; i+8 <= len(f); i += 8 {
				st.failures = append(st.failures, int64(binary.LittleEndian.Uint64(f[i:])))
			}
		}
		return st, nil
	})
}
