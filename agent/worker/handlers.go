package worker

import (
	"sync"
	"sync/atomic"
)

// handlerGoroutines runs message handlers on goroutines that, once their
// handler has returned, wait for the next one instead of ending, up to
// keep of them: a handler's stack grows to tens of KiB (the SQS SDK's
// middleware, the Redis client, the runner), and a fresh goroutine per
// message grew (copied) it again for every task, a few percent of the
// agent's CPU in BenchmarkSQSIntake (agent-redis: hundreds of short
// tasks a second). The idle ones end at close.
type handlerGoroutines struct {
	wg   *sync.WaitGroup
	keep int64
	next chan func()
	stop chan struct{}
	once sync.Once
	idle atomic.Int64
}

func newHandlerGoroutines(wg *sync.WaitGroup, keep int) *handlerGoroutines {
	return &handlerGoroutines{wg: wg, keep: int64(max(keep, 0)), next: make(chan func()), stop: make(chan struct{})}
}

// Go runs f on an idle goroutine, or on a new one (counted in wg) when
// none is idle.
func (h *handlerGoroutines) Go(f func()) {
	select {
	case h.next <- f:
		return
	default:
	}
	h.wg.Go(func() {
		for f != nil {
			f()
			f = h.wait()
		}
	})
}

// wait is the next handler for a goroutine whose handler returned; nil
// when it is to end: keep others are idle already, or close was called.
func (h *handlerGoroutines) wait() func() {
	if h.idle.Add(1) > h.keep {
		h.idle.Add(-1)
		return nil
	}
	defer h.idle.Add(-1)
	select {
	case f := <-h.next:
		return f
	case <-h.stop:
		return nil
	}
}

// close ends the idle goroutines; a Go after it still runs its f, on a
// goroutine that then ends.
func (h *handlerGoroutines) close() { h.once.Do(func() { close(h.stop) }) }
