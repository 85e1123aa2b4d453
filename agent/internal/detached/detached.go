// Package detached runs bookkeeping calls that must finish even when the
// caller's context has ended: a drain cancels the receive loop, not the
// records, audit entries and instance updates that follow it.
package detached

import (
	"context"
	"time"
)

// Call runs call on a fresh context bounded by d, keeping parent's values
// (trace, logger) but not its end.
func Call(parent context.Context, d time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
	defer cancel()
	return call(ctx)
}
