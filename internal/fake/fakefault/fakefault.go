package fakefault

import (
	"context"
	"sync"
	"time"
)

// Plan decides how a fake answers each request. F is the fake's fault type
// (its zero value answers normally), R its recorded request. The zero Plan
// answers every request at once without a fault; it is safe for concurrent
// use. A fake embeds it, so its methods are the fake's.
type Plan[F any, R any] struct {
	mu      sync.Mutex
	latency time.Duration
	script  []F
	always  F
	reqs    []R
	done    chan struct{}
	closed  bool
}

// SetLatency delays every answer by d (or until the client gives up).
func (p *Plan[F, R]) SetLatency(d time.Duration) { p.mu.Lock(); p.latency = d; p.mu.Unlock() }

// Script makes the next requests answer with faults, in order; after them
// the fake answers with Always's fault.
func (p *Plan[F, R]) Script(faults ...F) {
	p.mu.Lock()
	p.script = append(p.script, faults...)
	p.mu.Unlock()
}

// Always sets the fault of every request after the script.
func (p *Plan[F, R]) Always(f F) { p.mu.Lock(); p.always = f; p.mu.Unlock() }

// Requests returns the recorded requests.
func (p *Plan[F, R]) Requests() []R {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]R(nil), p.reqs...)
}

// Next records req and returns the fault it gets: the next scripted one,
// else the standing one.
func (p *Plan[F, R]) Next(req R) F {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	f := p.always
	if len(p.script) > 0 {
		f, p.script = p.script[0], p.script[1:]
	}
	return f
}

// Latency is the delay set by SetLatency.
func (p *Plan[F, R]) Latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// Wait waits d and reports whether the answer is still wanted: false when
// ctx (the request's) ends first or the plan is closed.
func (p *Plan[F, R]) Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-p.stopped():
		return false
	}
}

// Close ends pending waits at once, so a server closing need not wait for
// slow answers; later waits end at once too.
func (p *Plan[F, R]) Close() {
	ch := p.stopped()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(ch)
	}
}

func (p *Plan[F, R]) stopped() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}
