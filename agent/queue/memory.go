package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/tracing"
)

// MemoryQueueName is the embedded queue's messaging.destination.name.
const MemoryQueueName = "memory"

// Memory is an in-process queue for embedded mode (one agent, tasks POSTed
// to /v1/tasks). It keeps SQS's visibility semantics so the agent behaves the
// same on both: a received message is hidden until it is deleted or its
// visibility lapses, then it is handed out again with a higher receive count;
// with MaxReceiveCount, a message is dead-lettered on the receive that would
// exceed it, and Defer re-sends as the SQS source does.
type Memory struct {
	wait     time.Duration
	capacity int

	mu     sync.Mutex
	wake   chan struct{} // closed and replaced whenever a message may have become available
	book                 // with mu held
	closed bool
	// sealed: Seal was called; no Send or Receive succeeds any more.
	sealed bool
}

// book is Memory's account of its messages, with SQS's rules for moving
// them: ready, in flight until a visibility deadline, or dead-lettered.
type book struct {
	visibility      time.Duration
	maxReceiveCount int
	ready           []*memMsg
	inflight        map[string]*memMsg // by handle
	dead            []DeadLetter
}

// DeadLetter is a message Memory moved aside, with the reason.
type DeadLetter struct {
	Message Message
	Reason  string
}

type memMsg struct {
	msg       Message
	visibleAt time.Time
	held      bool // extended by Hold whenever its visibility lapses
}

// MemoryOptions tune a Memory queue; zero values take the defaults.
type MemoryOptions struct {
	// Visibility is how long a received message stays hidden (default 60s).
	Visibility time.Duration
	// Wait is the long-poll time of Receive (default 20s).
	Wait time.Duration
	// Capacity bounds the messages held; Send fails past it (default 10000).
	Capacity int
	// MaxReceiveCount is the redrive policy's: the receive that would
	// exceed it moves the message to the dead letters instead. Zero (the
	// default) means no redrive.
	MaxReceiveCount int
}

// keepDeadLetters bounds the dead letters Memory keeps for inspection.
const keepDeadLetters = 100

// ErrFull is returned by Memory.Send when the queue holds Capacity messages.
var ErrFull = fullError{}

type fullError struct{}

func (fullError) Error() string { return "queue: full" }

// NewMemory returns an empty in-memory queue.
func NewMemory(o MemoryOptions) *Memory {
	if o.Visibility <= 0 {
		o.Visibility = 60 * time.Second
	}
	if o.Wait <= 0 {
		o.Wait = 20 * time.Second
	}
	if o.Capacity <= 0 {
		o.Capacity = 10000
	}
	return &Memory{
		wait:     o.Wait,
		capacity: o.Capacity,
		wake:     make(chan struct{}),
		book: book{visibility: o.Visibility, maxReceiveCount: max(o.MaxReceiveCount, 0),
			inflight: map[string]*memMsg{}},
	}
}

var (
	_ Source = (*Memory)(nil)
	_ Sealer = (*Memory)(nil)
)

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// signal wakes every waiting Receive; called with mu held.
func (q *Memory) signal() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// Send enqueues body.
func (q *Memory) Send(ctx context.Context, body []byte) (string, error) {
	ctx, span := tracing.StartSend(ctx, tracing.SystemMemory, MemoryQueueName)
	defer span.End()
	attrs := map[string]string{}
	tracing.Inject(ctx, func(k, v string) { attrs[k] = v })
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.sealed {
		return "", ErrClosed
	}
	if len(q.ready)+len(q.inflight) >= q.capacity {
		tracing.Fail(span, ErrFull)
		return "", ErrFull
	}
	id := newID()
	q.ready = append(q.ready, &memMsg{msg: Message{
		ID:         id,
		Body:       append([]byte(nil), body...),
		SentAt:     time.Now(),
		Attributes: attrs,
	}})
	q.signal()
	tracing.Sent(span, id)
	return id, nil
}

// requeueExpired moves in-flight messages whose visibility lapsed back to
// ready and returns the earliest future visibility deadline (zero if none).
func (q *book) requeueExpired(now time.Time) time.Time {
	var next time.Time
	for h, m := range q.inflight {
		if m.held && !now.Before(m.visibleAt) {
			m.visibleAt = now.Add(q.visibility)
		}
		if !now.Before(m.visibleAt) {
			delete(q.inflight, h)
			m.msg.Handle = ""
			q.ready = append(q.ready, m)
			continue
		}
		if next.IsZero() || m.visibleAt.Before(next) {
			next = m.visibleAt
		}
	}
	return next
}

// Receive returns up to max messages, waiting up to the long-poll time for
// the first one.
func (q *Memory) Receive(ctx context.Context, max int) ([]*Message, error) {
	if max <= 0 {
		max = 1
	}
	deadline := time.NewTimer(q.wait)
	defer deadline.Stop()
	for {
		q.mu.Lock()
		if q.closed || q.sealed {
			q.mu.Unlock()
			return nil, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		now := time.Now()
		next := q.requeueExpired(now)
		q.redriveLocked()
		if len(q.ready) > 0 {
			out := q.takeLocked(now, max)
			q.mu.Unlock()
			return out, nil
		}
		wake := q.wake
		q.mu.Unlock()

		var expiry <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(next.Sub(now))
			expiry = t.C
		}
		var err error
		done := false
		select {
		case <-ctx.Done():
			err, done = ctx.Err(), true
		case <-deadline.C:
			done = true
		case <-wake:
		case <-expiry:
		}
		if t != nil {
			t.Stop()
		}
		if done {
			return nil, err
		}
	}
}

// takeLocked receives up to n ready messages: in flight under new
// handles, hidden for the visibility timeout.
func (q *book) takeLocked(now time.Time, n int) []*Message {
	n = min(n, len(q.ready))
	out := make([]*Message, 0, n)
	for _, m := range q.ready[:n] {
		m.held = false
		m.msg.ReceiveCount++
		m.msg.Handle = newID()
		m.visibleAt = now.Add(q.visibility)
		q.inflight[m.msg.Handle] = m
		c := m.msg
		c.Attributes = cloneMap(m.msg.Attributes)
		out = append(out, &c)
	}
	q.ready = q.ready[n:]
	return out
}

// Seal implements Sealer: Send and Receive fail with ErrClosed from now
// on, and every message visible now is received (as Receive would) and
// returned. Messages still in flight, or delayed by Defer, stay where
// they are; the other methods keep working on them.
func (q *Memory) Seal() []*Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.sealed {
		return nil
	}
	q.sealed = true
	now := time.Now()
	q.requeueExpired(now)
	q.redriveLocked()
	out := q.takeLocked(now, len(q.ready))
	q.signal()
	return out
}

// redriveLocked moves ready messages already received MaxReceiveCount
// times to the dead letters, as SQS does on the receive that would exceed
// it.
func (q *book) redriveLocked() {
	if q.maxReceiveCount == 0 {
		return
	}
	kept := q.ready[:0]
	for _, m := range q.ready {
		if m.msg.ReceiveCount >= q.maxReceiveCount {
			q.deadLocked(m.msg, "maxReceiveCount exceeded")
			continue
		}
		kept = append(kept, m)
	}
	clear(q.ready[len(kept):])
	q.ready = kept
}

func cloneMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Delete acknowledges m. Deleting a message whose handle is stale (it was
// handed out again since) is a no-op, as in SQS.
func (q *Memory) Delete(_ context.Context, m *Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inflight, m.Handle)
	return nil
}

// ChangeVisibility hides m for d (at most 12 hours); d == 0 makes it
// available at once. It ends a Hold of m.
func (q *Memory) ChangeVisibility(_ context.Context, m *Message, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changeVisibilityLocked(m, d)
}

func (q *Memory) changeVisibilityLocked(m *Message, d time.Duration) error {
	im, ok := q.inflight[m.Handle]
	if !ok {
		return errStaleHandle
	}
	im.held = false
	im.visibleAt = time.Now().Add(min(max(d, 0), maxSQSVisibility))
	// Waiting receivers recompute when the earliest message becomes visible.
	q.signal()
	return nil
}

var errStaleHandle = staleHandleError{}

type staleHandleError struct{}

func (staleHandleError) Error() string { return "queue: receipt handle is not in flight" }

// DeadLetter keeps m aside (bounded) with reason and deletes it.
func (q *Memory) DeadLetter(_ context.Context, m *Message, reason string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inflight, m.Handle)
	q.deadLocked(*m, reason)
	return nil
}

func (q *book) deadLocked(m Message, reason string) {
	q.dead = append(q.dead, DeadLetter{Message: m, Reason: reason})
	if len(q.dead) > keepDeadLetters {
		q.dead = q.dead[len(q.dead)-keepDeadLetters:]
	}
}

// Defer implements Source with the SQS source's semantics: within
// deferReserve of MaxReceiveCount, m is re-sent (receive count reset,
// DeferralsAttribute one higher, OriginalIDAttribute set, delayed by
// min(delay, 15 min)); otherwise it is ChangeVisibility.
func (q *Memory) Defer(_ context.Context, m *Message, delay time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	im, ok := q.inflight[m.Handle]
	if !ok {
		return errStaleHandle
	}
	if !mustResend(im.msg.ReceiveCount, q.maxReceiveCount) {
		return q.changeVisibilityLocked(m, delay)
	}
	delete(q.inflight, m.Handle)
	deferrals, _ := strconv.Atoi(im.msg.Attributes[DeferralsAttribute])
	attrs := cloneMap(im.msg.Attributes)
	attrs[DeferralsAttribute] = strconv.Itoa(deferrals + 1)
	attrs[OriginalIDAttribute] = im.msg.ID
	re := &memMsg{msg: Message{ID: im.msg.ID, Body: im.msg.Body, SentAt: time.Now(), Attributes: attrs}}
	if delay = min(max(delay, 0), maxSQSDelay); delay > 0 {
		// Delayed: in flight under a handle no consumer holds.
		re.visibleAt = time.Now().Add(delay)
		q.inflight[newID()] = re
	} else {
		q.ready = append(q.ready, re)
	}
	q.signal()
	return nil
}

// Hold implements Source: m stays hidden until release is called or it is
// deleted, deferred, dead-lettered or its visibility changed.
func (q *Memory) Hold(m *Message) (release func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if im, ok := q.inflight[m.Handle]; ok {
		im.held = true
	}
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if im, ok := q.inflight[m.Handle]; ok {
			im.held = false
		}
	}
}

// DeadLetters returns the most recent dead letters.
func (q *Memory) DeadLetters() []DeadLetter {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]DeadLetter(nil), q.dead...)
}

// Len reports messages waiting and in flight.
func (q *Memory) Len() (ready, inflight int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready), len(q.inflight)
}

// Close stops the queue; waiting receivers return ErrClosed.
func (q *Memory) Close(context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.signal()
	}
	return nil
}
