package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/queue"
)

// failingSource is a queue whose Receive always fails; it records when.
type failingSource struct {
	queue.Source
	mu    sync.Mutex
	calls []time.Time
}

func (f *failingSource) Receive(context.Context, int) ([]*queue.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, time.Now())
	return nil, errors.New("receive: 500 internal error")
}

// TestIntakeBacksOffOnReceiveErrors: a failing queue is polled after
// growing, jittered pauses capped near receiveRetryMax, not every second.
func TestIntakeBacksOffOnReceiveErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := &failingSource{}
		in := &receiver{src: src, slots: semaphore.NewWeighted(2), batch: 10, log: slog.New(slog.DiscardHandler),
			accept: func(*queue.Message, func()) { t.Error("accept without a message") }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); in.run(ctx) }()
		time.Sleep(10 * time.Minute)
		cancel()
		<-done

		// The backoff's jitter spreads each pause by ±50%.
		const jitter = 0.5
		maxPause := time.Duration(float64(receiveRetryMax) * (1 + jitter))
		if n := len(src.calls); n < 10 || n > 60 {
			t.Fatalf("%d receives in 10 minutes of failures, want a backoff between 1s and %v", n, receiveRetryMax)
		}
		var longest time.Duration
		for i := 1; i < len(src.calls); i++ {
			gap := src.calls[i].Sub(src.calls[i-1])
			if gap > maxPause {
				t.Fatalf("pause %d = %v, above the cap %v", i, gap, maxPause)
			}
			longest = max(longest, gap)
		}
		if first := src.calls[1].Sub(src.calls[0]); first > time.Duration(float64(receiveRetryInitial)*(1+jitter)) {
			t.Fatalf("first pause %v, want about %v", first, receiveRetryInitial)
		}
		if longest < receiveRetryMax/2 {
			t.Fatalf("longest pause %v: the backoff never grew towards %v", longest, receiveRetryMax)
		}
	})
}

// pollSource answers each receive after rtt with up to n of its left
// messages, or, with none left, after a long poll of 20s with none; it
// records how many receives were in flight at once and how
// many began after stopped was set.
type pollSource struct {
	queue.Source
	rtt time.Duration

	mu                    sync.Mutex
	left                  int
	inFlight, maxInFlight int
	afterStop             int
	stopped               bool
}

// Hold holds nothing: the receiver holds each message it receives.
func (s *pollSource) Hold(*queue.Message) func() { return func() {} }

func (s *pollSource) Receive(ctx context.Context, n int) ([]*queue.Message, error) {
	// As the SQS source: a receive on an ended context is not sent.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	if s.stopped {
		s.afterStop++
	}
	wait := s.rtt
	if s.left == 0 {
		wait = 20 * time.Second
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(n, s.left)
	s.left -= k
	msgs := make([]*queue.Message, k)
	for i := range msgs {
		msgs[i] = &queue.Message{ID: "m"}
	}
	return msgs, nil
}

func (s *pollSource) counts() (maxInFlight, afterStop int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight, s.afterStop
}

// TestIntakePollsInParallelOnlyWithABacklog: while receives come back full
// (a backlog), up to polls receives are in flight at once, each still
// bounded by the free slots; an empty queue is long-polled by one. Once
// the intake's context ends no receive begins, and run returns after
// the ones in flight.
func TestIntakePollsInParallelOnlyWithABacklog(t *testing.T) {
	t.Parallel()
	const (
		workers = 16
		window  = workers + workers/4
		batch   = 10
		polls   = 2
		run     = 3 * time.Millisecond // a task's run, after which its slot goes back
	)
	for _, tc := range []struct {
		name         string
		backlog      int
		rtt          time.Duration
		wantInFlight int
	}{
		{"backlog", 400, 10 * time.Millisecond, polls},
		{"empty queue", 0, 10 * time.Millisecond, 1},
		{"a few", 5, 10 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				src := &pollSource{rtt: tc.rtt, left: tc.backlog}
				slots := semaphore.NewWeighted(window)
				var (
					tasks    sync.WaitGroup
					mu       sync.Mutex
					accepted int
				)
				in := &receiver{src: src, slots: slots, batch: batch, polls: polls, log: slog.New(slog.DiscardHandler),
					accept: func(*queue.Message, func()) {
						mu.Lock()
						accepted++
						mu.Unlock()
						tasks.Go(func() { time.Sleep(run); slots.Release(1) })
					}}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); in.run(ctx) }()
				time.Sleep(time.Minute)
				cancel()
				src.mu.Lock()
				src.stopped = true
				src.mu.Unlock()
				<-done
				tasks.Wait()

				maxInFlight, afterStop := src.counts()
				if maxInFlight != tc.wantInFlight {
					t.Errorf("at most %d receives in flight at once, want %d", maxInFlight, tc.wantInFlight)
				}
				if afterStop != 0 {
					t.Errorf("%d receives began after the intake's context ended", afterStop)
				}
				if accepted != tc.backlog {
					t.Errorf("accepted %d of %d messages", accepted, tc.backlog)
				}
				if cur := slots.TryAcquire(window); !cur {
					t.Errorf("slots still held after run returned")
				}
			})
		})
	}
}

// holdingSource is a queue whose one Receive brings two messages and
// whose later ones end the intake; it records the messages held and
// released.
type holdingSource struct {
	queue.Source
	mu       sync.Mutex
	received bool
	held     []string
	released []string
}

func (h *holdingSource) Receive(context.Context, int) ([]*queue.Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.received {
		return nil, queue.ErrClosed
	}
	h.received = true
	return []*queue.Message{{ID: "m1"}, {ID: "m2"}}, nil
}

func (h *holdingSource) Hold(m *queue.Message) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, m.ID)
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.released = append(h.released, m.ID)
	}
}

// TestReceivedMessagesHeldBeforeAccept: every received message is held
// (kept hidden) before it is accepted, and accept gets the release of
// its own hold.
func TestReceivedMessagesHeldBeforeAccept(t *testing.T) {
	t.Parallel()
	src := &holdingSource{}
	var accepted []string
	slots := semaphore.NewWeighted(2)
	in := &receiver{src: src, slots: slots, batch: 2, log: slog.New(slog.DiscardHandler),
		accept: func(m *queue.Message, unhold func()) {
			defer slots.Release(1) // the job's end
			src.mu.Lock()
			held := append([]string(nil), src.held...)
			src.mu.Unlock()
			if len(held) != 2 {
				t.Errorf("accepting %s with %v held, want both messages held first", m.ID, held)
			}
			accepted = append(accepted, m.ID)
			unhold()
		}}
	in.run(context.Background())
	if len(accepted) != 2 {
		t.Fatalf("accepted %v, want m1 and m2", accepted)
	}
	if got := src.released; len(got) != 2 || got[0] != "m1" || got[1] != "m2" {
		t.Errorf("released %v, want each accepted message's own hold (m1, m2)", got)
	}
}
