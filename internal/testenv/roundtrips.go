package testenv

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts the round trips a client makes
// for its caller, leaving out two that are not the caller's:
//
//   - a new connection's handshake (HELLO, then a pipeline of CLIENT
//     SETINFO, AUTH, SELECT, READONLY): go-redis sends it through the
//     client's hooks, with the context of the command that needed the
//     connection, whenever the pool has no idle one;
//   - an EVALSHA answered NOSCRIPT: the test Redis is shared, and another
//     package's test may SCRIPT FLUSH it at any moment; the EVAL that
//     follows is counted.
type RoundTrips struct{ n atomic.Int64 }

// N is the round trips counted since the last Reset.
func (h *RoundTrips) N() int64 { return h.n.Load() }

// Reset sets the count to zero.
func (h *RoundTrips) Reset() { h.n.Store(0) }

func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if CallersTrip(cmd) {
			h.n.Add(1)
		}
		return err
	}
}

func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if CallersTrip(cmds...) {
			h.n.Add(1)
		}
		return err
	}
}

// CallersTrip reports whether a round trip of cmds, already answered, is
// one RoundTrips counts.
func CallersTrip(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if !setup(c) && !noScript(c) {
			return true
		}
	}
	return false
}

func setup(c redis.Cmder) bool {
	switch strings.ToLower(c.Name()) {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}

func noScript(c redis.Cmder) bool {
	return strings.EqualFold(c.Name(), "evalsha") && c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT")
}
