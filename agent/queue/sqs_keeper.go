package queue

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// keeper extends the visibility of held messages, in batches, every third
// of the visibility timeout, from one goroutine that runs while anything is
// held (and that Close waits for). A batch that goes out takes along, in
// its free entries, the holds due within 1/coalesceShare of the interval.
type keeper struct {
	s *SQS

	mu      sync.Mutex
	held    map[string]*heldMsg // by receipt handle
	wake    chan struct{}       // signalled when a hold may be due sooner
	running bool
	closed  bool
	done    sync.WaitGroup
}

type heldMsg struct {
	m   *Message
	due time.Time // next extension
	// busy is closed when the extension in flight for m ends; nil when
	// none is. unhold waits for it, so an extension never lands after the
	// caller's own visibility change or delete.
	busy chan struct{}
}

// coalesceShare: a hold due within interval/coalesceShare of a batch that
// goes out is extended with it. Extending early is safe (the message's
// visibility is set from now), and costs at most one extra entry per
// hold, once: afterwards it is due with the others.
const coalesceShare = 2

func newKeeper(s *SQS) *keeper {
	return &keeper{s: s, held: map[string]*heldMsg{}, wake: make(chan struct{}, 1)}
}

// Hold implements Source: m's visibility is extended to the visibility
// timeout (queue.visibility_timeout, else the queue's own) every third of
// it from its receive's answer (this source's, else m.ReceivedAt; sooner,
// once, to share the call of holds due before it), up to SQS's 12 hours
// in flight, until release is called or m is
// deleted, deferred, dead-lettered or its visibility changed. Extensions
// go out in ChangeMessageVisibilityBatch calls of up to 10; an entry that
// fails with a server fault is tried again a second later (sooner for a
// short timeout), one whose handle SQS no longer accepts is dropped with a
// warning. After Close, Hold does nothing.
func (s *SQS) Hold(m *Message) (release func()) {
	k := s.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return func() {}
	}
	if _, ok := k.held[m.Handle]; !ok {
		// The keeper's loop schedules it a third of the timeout after
		// its receive.
		k.held[m.Handle] = &heldMsg{m: m}
	}
	if !k.running {
		k.running = true
		k.done.Add(1)
		go k.run()
	}
	k.poke()
	return func() { k.unhold(m) }
}

// Held reports how many messages are held.
func (s *SQS) Held() int {
	s.keep.mu.Lock()
	defer s.keep.mu.Unlock()
	return len(s.keep.held)
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// unhold stops extending m and waits for an extension of it in flight.
func (k *keeper) unhold(m *Message) {
	k.mu.Lock()
	h := k.held[m.Handle]
	if h == nil {
		k.mu.Unlock()
		return
	}
	delete(k.held, m.Handle)
	busy := h.busy
	k.mu.Unlock()
	if busy != nil {
		<-busy
	}
}

// close stops the keeper; holds after it do nothing. Called by Close, which
// then cancels stop and waits.
func (k *keeper) close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
}

// wait returns once the keeper's goroutine has ended.
func (k *keeper) wait() { k.done.Wait() }

// visibility is what a held message is extended to.
func (k *keeper) visibility(ctx context.Context) time.Duration {
	if v := k.s.o.VisibilityTimeout; v > 0 {
		return v
	}
	a, err := k.s.taskAttrs.get(ctx, k.s.c, k.s.o.Clock.Now())
	if err != nil {
		k.s.log.Warn("reading the task queue's visibility timeout failed; assuming SQS's default",
			"visibility_seconds", a.visibility.Seconds(), "err", err)
	}
	return max(a.visibility, time.Second)
}

func (k *keeper) run() {
	defer k.done.Done()
	s := k.s
	actx, cancel := context.WithTimeout(s.stop, attrsReadLimit)
	vis := k.visibility(actx)
	cancel()
	interval := vis / 3
	retry := min(time.Second, interval)
	for {
		k.mu.Lock()
		if len(k.held) == 0 || s.stop.Err() != nil {
			k.running = false
			k.mu.Unlock()
			return
		}
		now := s.o.Clock.Now()
		var due, soon []*heldMsg
		var next time.Time
		for _, h := range k.held {
			if h.due.IsZero() {
				// A handed message (ReceivedAt set) has been in flight
				// since the other agent's receive: its first extension
				// is due a third of the timeout after that, at once
				// when the hand-off took longer.
				at := now
				if r := h.m.ReceivedAt; !r.IsZero() && r.Before(now) {
					at = r
				}
				h.due = s.answeredAt(h.m.Handle, at).Add(interval)
			}
			if !h.due.After(now) {
				h.busy = make(chan struct{})
				due = append(due, h)
				continue
			}
			if h.due.Sub(now) <= interval/coalesceShare {
				soon = append(soon, h)
			}
			if next.IsZero() || h.due.Before(next) {
				next = h.due
			}
		}
		if room := (maxSQSBatch - len(due)%maxSQSBatch) % maxSQSBatch; len(due) > 0 && room > 0 && len(soon) > 0 {
			// Those due soon go along in the call that goes out anyway:
			// extended a little early, they stay on its schedule, so a
			// few messages held at different times share one call per
			// interval instead of one each.
			slices.SortFunc(soon, func(a, b *heldMsg) int { return a.due.Compare(b.due) })
			for _, h := range soon[:min(room, len(soon))] {
				h.busy = make(chan struct{})
				due = append(due, h)
			}
		}
		k.mu.Unlock()
		if len(due) > 0 {
			for len(due) > 0 {
				n := min(maxSQSBatch, len(due))
				k.extend(due[:n], vis, interval, retry)
				due = due[n:]
			}
			continue
		}
		var fire <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(next.Sub(now))
			fire = t.C
		}
		select {
		case <-s.stop.Done():
		case <-k.wake:
		case <-fire:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// extend sends one ChangeMessageVisibilityBatch for batch (at most 10
// holds, each marked busy) and schedules each hold's next extension.
func (k *keeper) extend(batch []*heldMsg, vis, interval, retry time.Duration) {
	s := k.s
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, len(batch))
	sent := make([]*heldMsg, 0, len(batch))
	var expired []*heldMsg
	s.mu.Lock()
	for _, h := range batch {
		d := s.clampLocked(h.m.Handle, vis)
		if d == 0 {
			expired = append(expired, h)
			continue
		}
		entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(len(sent))),
			ReceiptHandle:     aws.String(h.m.Handle),
			VisibilityTimeout: int32(ceilSeconds(d)),
		})
		sent = append(sent, h)
	}
	s.mu.Unlock()
	var out *sqs.ChangeMessageVisibilityBatchOutput
	var err error
	if len(entries) > 0 {
		ctx, cancel := context.WithTimeout(s.stop, interval)
		out, err = s.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(s.o.QueueURL), Entries: entries,
		})
		cancel()
		if err != nil && s.stop.Err() == nil {
			s.log.Warn("extending held messages failed; trying again", "messages", len(entries), "retry_in_seconds", retry.Seconds(), "err", err)
		}
	}
	now := s.o.Clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	drop := func(h *heldMsg) {
		if k.held[h.m.Handle] == h {
			delete(k.held, h.m.Handle)
		}
	}
	for _, h := range expired {
		s.log.Warn("held message reached SQS's 12 hours in flight; no longer extended", "message_id", h.m.ID)
		drop(h)
	}
	for _, h := range sent {
		h.due = now.Add(retry)
	}
	if out != nil {
		for _, e := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(e.Id)); err == nil && i >= 0 && i < len(sent) {
				sent[i].due = now.Add(interval)
			}
		}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(sent) {
				continue
			}
			h := sent[i]
			ferr := &BatchEntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
			if f.SenderFault {
				// The handle is stale or invalid: the message was received
				// again, deleted or has lapsed; extending cannot succeed.
				s.log.Warn("held message can no longer be extended", "message_id", h.m.ID, "err", ferr)
				drop(h)
				continue
			}
			s.log.Warn("extending a held message failed; trying again", "message_id", h.m.ID, "retry_in_seconds", retry.Seconds(), "err", ferr)
		}
	}
	for _, h := range batch {
		close(h.busy)
		h.busy = nil
	}
}
