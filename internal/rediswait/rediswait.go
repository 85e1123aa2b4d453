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

	"github.com/redis/go-redis/v9"
)

// HonoursDeadlines reports whether c cuts every call at its context's
// deadline: a *redis.Client, *redis.ClusterClient or *redis.Ring built
// with ContextTimeoutEnabled. Do runs such a client's calls on the
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

// Do returns f(ctx), or ErrNoReply wrapping ctx's error once ctx ends first. Unless direct (the
// client cuts the call at ctx's end itself) or ctx never ends, f runs on a
// goroutine of its own, which finishes on its own when Do has stopped
// waiting: f must not write anything its caller reads, and gets the
// caller's ctx, so the client sends nothing more for it once ctx has
// ended (no connection is handed out for a done context) but reads the
// reply of a command already sent.
func Do[T any](ctx context.Context, direct bool, f func(context.Context) (T, error)) (T, error) {
	if direct || ctx.Done() == nil {
		return f(ctx)
	}
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := f(ctx)
		done <- answer{v, err}
	}()
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
