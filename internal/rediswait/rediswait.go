// Package rediswait bounds a caller's wait for a go-redis call by the
// call's context without cutting the call.
//
// go-redis closes a connection whenever a command ends without its reply
// (a read cut by a timeout or a context deadline: the reply could still
// come, and the next command on that connection would read it), and the
// next command dials again: TCP, HELLO and the client's identity before
// it is sent. With ContextTimeoutEnabled every context deadline cuts the
// read that passes it, so against a slow Redis each call that runs out of
// time costs a connection and its replacement costs Redis more than the
// call did, which slows it further. A client without that option bounds a
// read by its ReadTimeout instead and uses the context only to wait for a
// connection (the pool's turn, a dial, a retry's backoff): a command once
// sent reads its reply, however late, and its connection goes back to
// the pool. Do gives such a client's caller its deadline back: it waits
// for the call at most until the context ends and leaves the call to read
// its reply on a goroutine of its own.
package rediswait

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// HonoursDeadlines reports whether c cuts every call at its context's
// deadline: a *redis.Client, *redis.ClusterClient or *redis.Ring built
// with ContextTimeoutEnabled. Do runs such a client's calls (For) on the
// caller's goroutine.
func HonoursDeadlines(c any) bool {
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

// ErrNoReply wraps ctx's error when Do stopped waiting for a call at ctx's
// end.
var ErrNoReply = errors.New("redis: no reply before the context ended")

// Waiter is how Do runs the calls of one client: on the caller's
// goroutine when the client cuts a call at its context's deadline
// itself, else on a goroutine of its Helpers. The zero Waiter starts a
// new goroutine for every call.
type Waiter struct {
	direct  bool
	helpers *Helpers
}

// For returns the Waiter of client c, with Helpers of its own.
func For(c any) Waiter {
	if HonoursDeadlines(c) {
		return OnCaller()
	}
	return Waiter{helpers: NewHelpers()}
}

// OnCaller is the Waiter of a client that cuts every call at its
// context's deadline itself: Do runs its calls on their caller's
// goroutine.
func OnCaller() Waiter { return Waiter{direct: true} }

// Direct reports whether w runs calls on their caller's goroutine.
func (w Waiter) Direct() bool { return w.direct }

// Do returns f(ctx), or ErrNoReply wrapping ctx's error once ctx ends
// first. Unless w is direct (the client cuts the call at ctx's end
// itself) or ctx never ends, f runs on another goroutine, which finishes
// the call on its own when Do has stopped waiting: f must not write
// anything its caller reads, and gets the caller's ctx, so the client
// sends nothing more for it once ctx has ended (no connection is handed
// out for a done context) but reads the reply of a command already sent.
func Do[T any](ctx context.Context, w Waiter, f func(context.Context) (T, error)) (T, error) {
	if w.direct || ctx.Done() == nil {
		return f(ctx)
	}
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	w.helpers.Go(func() {
		v, err := f(ctx)
		done <- answer{v, err}
	})
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		select {
		case a := <-done: // answered as ctx ended
			return a.v, a.err
		default:
		}
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrNoReply, ctx.Err())
	}
}

// HelperIdle is how long one of Helpers' goroutines waits for its next
// call before it ends.
const HelperIdle = time.Second

// Helpers are the goroutines Do runs calls on, kept for the next call
// once theirs has returned: a call through go-redis grows a goroutine's
// stack to tens of KiB (the pool's wait, the command's encoding), and a
// fresh goroutine per call grew (copied) it again for every call, 6 % of
// the agent's CPU in BenchmarkSQSIntake (agent-redis). A goroutine that
// waited HelperIdle for a call ends, so Helpers need no closing. Inside a
// testing/synctest bubble, whose clock stops once its function returns, a
// test lets HelperIdle pass after its last call; and Helpers are used by
// the bubble they were made in, or outside any: a goroutine of one bubble
// cannot take a call from another.
type Helpers struct {
	next chan func()
}

// NewHelpers returns Helpers with no goroutine yet.
func NewHelpers() *Helpers { return &Helpers{next: make(chan func())} }

// Go runs f on an idle helper, or on a new goroutine when none is idle or
// h is nil.
func (h *Helpers) Go(f func()) {
	if h == nil {
		go f()
		return
	}
	select {
	case h.next <- f:
		return
	default:
	}
	go h.run(f)
}

// run runs f, then the calls handed to it, until it waited HelperIdle
// for one.
func (h *Helpers) run(f func()) {
	idle := time.NewTimer(HelperIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(HelperIdle)
		select {
		case f = <-h.next:
		case <-idle.C:
			return
		}
	}
}
