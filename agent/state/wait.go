package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/autodiag/autodiag/internal/rediswait"
)

// waiting is every Redis store of the package: the waiter of its client.
type waiting interface{ waiterOf() rediswait.Waiter }

func (c *client) waiterOf() rediswait.Waiter { return c.waiter }

// wait runs f, the store call op of id, for a caller that waits for it at
// most until ctx ends. With a client that does not cut a read at its
// context's deadline (the agent's, see rediswait), a call still
// unanswered then reads its reply on a goroutine of its own and gives its
// connection back to the pool, instead of the client closing it and
// dialling again for the next call; it sends nothing more once ctx has
// ended. f must not write anything its caller reads: every exported call
// of a Redis store is its parameters in, its results out.
func wait[T any](ctx context.Context, r waiting, op, id string, f func(context.Context) (T, error)) (T, error) {
	v, err := rediswait.Do(ctx, r.waiterOf(), f)
	if errors.Is(err, rediswait.ErrNoReply) {
		if id != "" {
			op += " " + id
		}
		err = fmt.Errorf("state: %s: %w", op, err)
	}
	return v, err
}

// wait0 is wait for a call with no result but its error.
func wait0(ctx context.Context, r waiting, op, id string, f func(context.Context) error) error {
	_, err := wait(ctx, r, op, id, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}
