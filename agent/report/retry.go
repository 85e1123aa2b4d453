package report

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Retrying sends one request until it is answered: a 429 or 5xx is retried
// with exponential backoff (from initial, growing by 1.5 with jitter up
// to maxBackoff, at least the provider's Retry-After) while ctx leaves
// time for the wait. Every report's model calls go through it: the
// single-shot report's one, and each turn of an investigation.
type Retrying struct {
	Provider Provider
	// Initial is the first wait; 0 is DefaultInitialBackoff.
	Initial time.Duration
}

// CallResult is the end of a Retrying call: the last answer or error, how many
// requests were sent, and the provider's last refusal (a try cut off by
// the deadline says only that time ran out, not why it had to retry).
type CallResult struct {
	Response Response
	Err      error
	Attempts int
	Answered *Error
}

// Do sends req until it is answered, a failure is not worth retrying, or
// ctx has no time for another try.
func (c Retrying) Do(ctx context.Context, req Request) CallResult {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = c.Initial, maxBackoff
	if bo.InitialInterval <= 0 {
		bo.InitialInterval = DefaultInitialBackoff
	}
	var out CallResult
	for {
		out.Attempts++
		cctx, span := StartChat(ctx, c.Provider.Name(), req)
		out.Response, out.Err = c.Provider.Complete(cctx, req)
		EndChat(span, out.Response, out.Err)
		var pe *Error
		if errors.As(out.Err, &pe) && pe.StatusCode != 0 {
			out.Answered = pe
		}
		if out.Err == nil || ctx.Err() != nil || pe == nil || !pe.Retryable() {
			return out
		}
		wait := bo.NextBackOff()
		if pe.RetryAfter > wait {
			wait = pe.RetryAfter
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return out // the next try could not end in time
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			return out
		}
	}
}
