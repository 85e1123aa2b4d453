package limiter

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

//go:embed allow.lua
var allowLua string

var allowSHA = func() string {
	h := sha1.Sum([]byte(allowLua))
	return hex.EncodeToString(h[:])
}()

// scripter is the part of a go-redis client the limiter uses: Process, which
// runs a command built with redis.NewCmd. *redis.Client, *redis.ClusterClient,
// *redis.Ring, failover clients and *redis.AutoPipeliner (which batches it;
// its Do would not) all have it.
type scripter interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

var (
	_ scripter = (*redis.Client)(nil)
	_ scripter = (*redis.ClusterClient)(nil)
	_ scripter = (*redis.Ring)(nil)
	_ scripter = (*redis.AutoPipeliner)(nil)
	_ scripter = redis.UniversalClient(nil)
)

// Redis is the shared backend: one decision is one EVALSHA of allow.lua
// (EVAL once when the server does not have the script cached).
type Redis struct {
	c      scripter
	prefix string
	pipe   pipeliner // c when it bounds a call by its context's deadline (see honoursDeadlines), else nil
	slots  doneSlots // Done channels of direct calls
	co     coalescer // direct calls in flight and queued
	calls  sync.Pool // *evalCall
}

var _ Backend = (*Redis)(nil)

// NewRedis returns a backend storing state under keys starting with prefix
// (redis.prefix, e.g. "autodiag:") in the Redis that client talks to. Any
// go-redis client fits: Client, ClusterClient, Ring, failover clients, and
// the client's AutoPipeline(), which batches concurrent decisions into
// pipelines (still one EVALSHA per decision).
//
// The limiter bounds each call by Options.Timeout. A *redis.Client,
// *redis.ClusterClient or *redis.Ring with ContextTimeoutEnabled turns a
// context deadline into its pool-wait, dial, read and write deadlines, so the
// call runs on the caller's goroutine under a deadline; with any
// other client (or without that option) the call runs on a goroutine of its
// own that the decision stops waiting for at the timeout. With such a
// direct client, concurrent decisions beyond maxInFlight calls in flight are
// coalesced into pipelines (see coalescer).
func NewRedis(client scripter, prefix string) *Redis {
	b := &Redis{c: client, prefix: prefix}
	if honoursDeadlines(client) {
		b.pipe = client.(pipeliner)
	}
	return b
}

// pipeliner is a client that can send a batch of commands in one pipeline.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// honoursDeadlines reports whether c bounds every call by its context's
// deadline.
func honoursDeadlines(c scripter) bool {
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

// coalescer batches direct calls: at most maxInFlight EVALSHAs of one
// backend are sent on their own; decisions arriving while that many are in
// flight queue, and the first call to finish hands the whole queue to its
// first member, which sends it as ONE pipeline (still one EVALSHA per
// decision, each atomic on its own) and hands the replies out. Under
// concurrency this turns one write and one read system call per decision,
// on the client and on the server, into one per batch; a lone decision is
// never delayed.
type coalescer struct {
	mu       sync.Mutex
	inFlight int
	queue    []*evalCall
}

// maxInFlight is how many direct calls (single or batches) of one backend
// may be in flight at once. Measured on 2 cores (scripts/bench, plain, vs
// redis_rate): 2 cost 20% at 8 goroutines (0.78 vs 1.0 with 8) for no gain
// at 64; 16 and 32 gave 1.4 and 1.25 at 64 goroutines, 8 gave 1.55.
var maxInFlight = 8 // doc.go says "eight"

// direct runs ec (deadline and args set) on the caller's goroutine, alone or
// in a batch, and returns when ec.reply and ec.err are set.
func (b *Redis) direct(ec *evalCall) {
	co := &b.co
	co.mu.Lock()
	if co.inFlight < maxInFlight {
		co.inFlight++
		co.mu.Unlock()
		b.call(&ec.ctx, ec, ec.nargs)
		<-ec.done
	} else {
		co.queue = append(co.queue, ec)
		co.mu.Unlock()
		<-ec.done
		if ec.batch == nil {
			return // a leader ran it
		}
		batch := ec.batch
		ec.batch = nil
		b.runBatch(ec, batch)
	}
	b.release()
}

// release frees a slot in flight, or hands it to the queued calls, if any,
// as one batch led by its first member.
func (b *Redis) release() {
	co := &b.co
	co.mu.Lock()
	if len(co.queue) == 0 {
		co.inFlight--
		co.mu.Unlock()
		return
	}
	batch := co.queue
	co.queue = nil
	co.mu.Unlock()
	batch[0].batch = batch
	batch[0].done <- struct{}{}
}

// runBatch sends the calls of batch (leader among them) as one pipeline
// under the leader's deadline and hands each other member its reply. The
// leader's cancellation is not the batch's: it would fail the others'
// decisions.
func (b *Redis) runBatch(leader *evalCall, batch []*evalCall) {
	ctx := &deadlineCtx{Context: context.WithoutCancel(leader.ctx.Context), deadline: leader.ctx.deadline, done: leader.ctx.done}
	pipe := b.pipe.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, e := range batch {
		cmds[i] = redis.NewCmd(ctx, e.args[:e.nargs]...)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx)
	for i, e := range batch {
		cmd := cmds[i]
		if err := cmd.Err(); err != nil && isNoScript(err) {
			e.args[0], e.args[1] = argEval, argScript
			cmd = redis.NewCmd(ctx, e.args[:e.nargs]...)
			_ = b.c.Process(ctx, cmd)
		}
		e.reply, e.err = cmd.Text()
		if e != leader {
			e.done <- struct{}{}
		}
	}
}

// ErrBadReply means the script's reply could not be understood.
var ErrBadReply = errors.New("limiter: unexpected reply from allow.lua")

// evalCall holds one call's arguments, reused through a sync.Pool so that a
// decision allocates little: strings are slices of buf and are passed to
// go-redis as *string (boxing a pointer does not allocate).
type evalCall struct {
	buf  []byte
	strs [nKeys + nArgv]string // keys, then ARGV
	args [3 + nKeys + nArgv]interface{}
	ctx  deadlineCtx
	// direct calls (see coalescer)
	nargs int
	batch []*evalCall // set when this call leads a batch

	// done is signalled once the reply is in (by the call's own goroutine,
	// on the goroutine path, or by a batch's leader), or when a queued direct
	// call is handed a batch to lead. Buffered(1): the signaller never blocks.
	done  chan struct{}
	timer *time.Timer
	reply string
	err   error
}

// deadlineCtx is ctx with an earlier deadline but without a timer of its
// own. A client with ContextTimeoutEnabled turns it into dial, read and write
// deadlines, which lets an abandoned call (see eval) end promptly. When done
// is set (the direct path) it is the context's Done channel: it closes at the
// deadline or at most doneSlack later, so a wait for a pooled connection ends
// too; a cancelled parent then shows in Err at once, but interrupts such a
// wait only at that deadline.
type deadlineCtx struct {
	context.Context
	deadline time.Time
	done     <-chan struct{}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} {
	if c.done != nil {
		return c.done
	}
	return c.Context.Done()
}

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil || c.done == nil {
		return err
	}
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// doneSlots hands out Done channels shared by the calls whose deadlines are
// close together: one timer and one channel per slot of doneSlack instead of
// a context.WithTimeout (its timer, channel and closures) per decision.
type doneSlots struct {
	cur atomic.Pointer[doneSlot]
	mu  sync.Mutex
}

type doneSlot struct {
	end time.Time // the channel closes at end
	ch  chan struct{}
}

// doneSlack is how much later than its deadline a direct call's Done channel
// may close: a fraction of the timeout.
func doneSlack(timeout time.Duration) time.Duration { return timeout/8 + time.Millisecond }

// done returns a channel that closes at deadline or at most slack later.
func (s *doneSlots) done(deadline time.Time, slack time.Duration) <-chan struct{} {
	if c := s.cur.Load(); c != nil && !c.end.Before(deadline) && c.end.Sub(deadline) <= slack {
		return c.ch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur.Load(); c != nil && !c.end.Before(deadline) && c.end.Sub(deadline) <= slack {
		return c.ch
	}
	c := &doneSlot{end: deadline.Add(slack), ch: make(chan struct{})}
	time.AfterFunc(time.Until(c.end), func() { close(c.ch) })
	s.cur.Store(c)
	return c.ch
}

// errTimeout is the cause of a decision that waited longer than the timeout.
var errTimeout = errors.New("timed out")

var (
	argEvalSha interface{} = "evalsha"
	argEval    interface{} = "eval"
	argSHA     interface{} = allowSHA
	argScript  interface{} = allowLua
)

func (b *Redis) eval(ctx context.Context, o op, timeout time.Duration) (result, error) {
	ec, _ := b.calls.Get().(*evalCall)
	if ec == nil {
		ec = &evalCall{buf: make([]byte, 0, 512), done: make(chan struct{}, 1)}
	}
	nkeys := b.encode(ec, &o)
	ec.args[0], ec.args[1], ec.args[2] = argEvalSha, argSHA, nkeys
	for i := range nkeys + nArgv {
		ec.args[3+i] = &ec.strs[i]
	}
	if timeout <= 0 {
		b.call(ctx, ec, 3+nkeys+nArgv)
		<-ec.done
		return b.finish(ec)
	}
	ec.ctx = deadlineCtx{Context: ctx, deadline: time.Now().Add(timeout)}
	if pd, ok := ctx.Deadline(); ok && pd.Before(ec.ctx.deadline) {
		ec.ctx.deadline = pd
	}
	if b.pipe != nil {
		// The client turns the deadline into its dial, read and write
		// deadlines, and Done bounds a wait for a pooled connection: the
		// call runs here, no goroutine needed to stop waiting.
		ec.ctx.done = b.slots.done(ec.ctx.deadline, doneSlack(timeout))
		ec.nargs = 3 + nkeys + nArgv
		b.direct(ec)
		if ec.err != nil && ctx.Err() == nil && !time.Now().Before(ec.ctx.deadline) {
			return result{}, fmt.Errorf("redis evalsha allow.lua: %w after %s: %w", errTimeout, timeout, ec.err)
		}
		return b.finish(ec)
	}
	if ec.timer == nil {
		ec.timer = time.NewTimer(timeout)
	} else {
		ec.timer.Reset(timeout)
	}
	go b.call(&ec.ctx, ec, 3+nkeys+nArgv)
	select {
	case <-ec.done:
		ec.timer.Stop()
		return b.finish(ec)
	case <-ec.timer.C:
		// ec belongs to the abandoned call now; it is not reused.
		return result{}, fmt.Errorf("redis evalsha allow.lua: %w after %s", errTimeout, timeout)
	case <-ctx.Done():
		ec.timer.Stop()
		return result{}, ctx.Err()
	}
}

// call runs allow.lua with ec's arguments (EVAL when the script is not
// cached) and signals ec.done.
func (b *Redis) call(ctx context.Context, ec *evalCall, nargs int) {
	args := ec.args[:nargs]
	cmd := redis.NewCmd(ctx, args...)
	if err := b.c.Process(ctx, cmd); err != nil && isNoScript(err) {
		ec.args[0], ec.args[1] = argEval, argScript
		cmd = redis.NewCmd(ctx, args...)
		_ = b.c.Process(ctx, cmd)
	}
	ec.reply, ec.err = cmd.Text()
	ec.done <- struct{}{}
}

// finish reads the result of a completed call (ec.done received) and
// recycles ec.
func (b *Redis) finish(ec *evalCall) (result, error) {
	reply, err := ec.reply, ec.err
	if err != nil {
		// With autopipelining the command may still be queued and read ec: drop it.
		return result{}, fmt.Errorf("redis evalsha allow.lua: %w", err)
	}
	res, err := parseReply(reply)
	ec.ctx, ec.reply = deadlineCtx{}, ""
	clear(ec.args[:])
	b.calls.Put(ec)
	return res, err
}

func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// encode writes the decision's keys and ARGV into ec.buf and points
// ec.strs at them; it returns the number of keys. The key order matches
// allow.lua's KEYS.
func (b *Redis) encode(ec *evalCall, o *op) int {
	buf := ec.buf[:0]
	var ends [nKeys + nArgv + 1]int
	n := 0
	if o.dedupeID != "" {
		buf = append(buf, b.prefix...)
		buf = append(buf, "lim:{"...)
		buf = append(buf, o.tag...)
		buf = append(buf, "}:dd:"...)
		buf = append(buf, o.host...)
		buf = append(buf, ':')
		buf = append(buf, o.diag...)
		buf = append(buf, ':')
		buf = append(buf, o.dedupeID...)
		n++
		ends[n] = len(buf)
	}
	key := func(kind string) {
		buf = append(buf, b.prefix...)
		buf = append(buf, "lim:{"...)
		buf = append(buf, o.tag...)
		buf = append(buf, "}:"...)
		buf = append(buf, kind...)
		buf = append(buf, o.rule...)
		n++
		ends[n] = len(buf)
	}
	if o.order != "" || o.block > 0 {
		key("s:")
	}
	wz := int64(0)
	if o.winCount > windowLogMax {
		key("w:")
		wz = 1
	}
	// ARGV (see allow.lua): packed integers, order, member.
	m := n
	dry := int64(0)
	if o.dry {
		dry = 1
	}
	for _, v := range [...]int64{dry, o.now, o.dedupeTTL, o.block, int64(o.daily), o.dayNum, o.dailyTTL,
		o.minIvl, int64(o.winCount), o.winPer, o.rateT, int64(o.rateCap), wz} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
	}
	m++
	ends[m] = len(buf)
	if o.order == "" {
		buf = append(buf, '-')
	} else {
		buf = append(buf, o.order...)
	}
	m++
	ends[m] = len(buf)
	buf = strconv.AppendUint(buf, o.member, 10)
	m++
	ends[m] = len(buf)
	ec.buf = buf
	// buf is not written again until ec goes back to the pool, after the call.
	s := unsafe.String(unsafe.SliceData(buf), len(buf))
	for k := range m {
		ec.strs[k] = s[ends[k]:ends[k+1]]
	}
	return n
}

// nKeys and nArgv are the most KEYS and the number of ARGV of allow.lua.
const (
	nKeys = 3
	nArgv = 3
)

// windowLogMax is the largest window count kept as a log in the rule's
// state string; a larger window is a sorted set of its own. The log costs
// a copy of every entry per decision (about 10 µs more per 100 entries on a
// small machine), the sorted set about 5 µs more whatever its size (ZCOUNT,
// ZREMRANGEBYSCORE, ZADD, PEXPIRE). A variable for tests only.
var windowLogMax = 64

// parseReply parses allow.lua's reply: 7 little-endian int64.
func parseReply(s string) (result, error) {
	if len(s) != 7*8 {
		return result{}, fmt.Errorf("%w: %d bytes", ErrBadReply, len(s))
	}
	f := func(i int) int64 {
		return int64(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i*8:]), 8)))
	}
	return result{status: int(f(0)), limit: byte(f(1)), retry: f(2), dailyUsed: f(3), since: f(4),
		winCount: f(5), level: f(6)}, nil
}
