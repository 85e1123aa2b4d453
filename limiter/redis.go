package limiter

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed allow.lua
var allowLua string

// allowScript runs allow.lua: EVALSHA, and EVAL when the server does not
// have the script cached (a restarted or failed-over Redis).
var allowScript = redis.NewScript(allowLua)

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
// (6 a decision instead of 23; redis_rate makes 22) but no measurable
// time. scripts/bench, plain mode, full-rule decisions/s over redis_rate
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
	// bounded: c turns a context deadline into its pool-wait, dial, read
	// and write deadlines, so a call can run on the caller's goroutine.
	bounded bool
	// logMax is the largest window count kept as a log in the rule's state
	// string; a larger window is a sorted set of its own. The log costs a
	// copy of every entry per decision (about 10 µs more per 100 entries
	// on a small machine), the sorted set about 5 µs more whatever its
	// size (ZCOUNT, ZREMRANGEBYSCORE, ZADD, PEXPIRE).
	logMax int
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
// that the decision stops waiting for at the timeout.
func NewRedis(client redis.Scripter, prefix string) *Redis {
	return &Redis{c: client, prefix: prefix, bounded: honoursDeadlines(client), logMax: defaultWindowLogMax}
}

// honoursDeadlines reports whether c bounds every call by its context's
// deadline.
func honoursDeadlines(c redis.Scripter) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ErrBadReply means the script's reply could not be understood.
var ErrBadReply = errors.New("limiter: unexpected reply from allow.lua")

// errTimeout is the cause of a decision that waited longer than the timeout.
var errTimeout = errors.New("timed out")

func (b *Redis) eval(parent context.Context, o op, timeout time.Duration) (result, error) {
	keys, args := b.encode(&o)
	if timeout <= 0 {
		return b.run(parent, keys, args)
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	var res result
	var err error
	if b.bounded {
		res, err = b.run(ctx, keys, args)
	} else {
		// The client does not stop at ctx's deadline: wait on a goroutine
		// of its own and abandon it at the timeout. The abandoned call ends
		// with the client's own timeouts.
		type answer struct {
			res result
			err error
		}
		done := make(chan answer, 1)
		go func() {
			r, err := b.run(ctx, keys, args)
			done <- answer{r, err}
		}()
		select {
		case a := <-done:
			res, err = a.res, a.err
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil && parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return result{}, fmt.Errorf("redis evalsha allow.lua: %w after %s: %w", errTimeout, timeout, err)
	}
	return res, err
}

// run runs allow.lua once and parses its reply.
func (b *Redis) run(ctx context.Context, keys []string, args []any) (result, error) {
	reply, err := allowScript.Run(ctx, b.c, keys, args...).Text()
	if err != nil {
		return result{}, fmt.Errorf("redis evalsha allow.lua: %w", err)
	}
	return parseReply(reply)
}

// encode returns the decision's KEYS, in allow.lua's order, and ARGV.
func (b *Redis) encode(o *op) ([]string, []any) {
	keys := make([]string, 0, 3)
	if o.dedupeID != "" {
		keys = append(keys, b.prefix+"lim:{"+o.tag+"}:dd:"+o.host+":"+o.diag+":"+o.dedupeID)
	}
	key := func(kind string) { keys = append(keys, b.prefix+"lim:{"+o.tag+"}:"+kind+o.rule) }
	if o.order != "" || o.block > 0 {
		key("s:")
	}
	wz := int64(0)
	if o.winCount > b.logMax {
		key("w:")
		wz = 1
	}
	dry := int64(0)
	if o.dry {
		dry = 1
	}
	packed := make([]byte, 0, 13*8)
	for _, v := range [...]int64{dry, o.now, o.dedupeTTL, o.block, int64(o.daily), o.dayNum, o.dailyTTL,
		o.minIvl, int64(o.winCount), o.winPer, o.rateT, int64(o.rateCap), wz} {
		packed = binary.LittleEndian.AppendUint64(packed, uint64(v))
	}
	order := o.order
	if order == "" {
		order = "-"
	}
	return keys, []any{packed, order, strconv.FormatUint(o.member, 10)}
}

// parseReply parses allow.lua's reply: 7 little-endian int64.
func parseReply(s string) (result, error) {
	if len(s) != 7*8 {
		return result{}, fmt.Errorf("%w: %d bytes", ErrBadReply, len(s))
	}
	p := []byte(s)
	f := func(i int) int64 { return int64(binary.LittleEndian.Uint64(p[i*8:])) }
	return result{status: int(f(0)), limit: byte(f(1)), retry: f(2), dailyUsed: f(3), since: f(4),
		winCount: f(5), level: f(6)}, nil
}
