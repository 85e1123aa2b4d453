package sqsfake

import (
	"container/heap"
	"time"
)

type msgState int

const (
	stateVisible msgState = iota
	stateInflight
	stateDelayed
	stateGone
)

func (st msgState) String() string {
	switch st {
	case stateVisible:
		return "visible"
	case stateInflight:
		return "inflight"
	case stateDelayed:
		return "delayed"
	default:
		return "gone"
	}
}

type message struct {
	id           string
	body         string
	md5Body      string
	attrs        map[string]MessageAttribute
	sysAttrs     map[string]MessageAttribute
	senderID     string
	sentAt       time.Time
	firstRecvAt  time.Time
	receivedAt   time.Time // latest receive: the 12 h visibility limit counts from here
	receiveCount int
	state        msgState
	visibleAt    time.Time // when an in-flight or delayed message becomes visible
	expireAt     time.Time
	gen          uint64 // bumped on every state change; stale heap/list entries are skipped
	dlqSource    string // DeadLetterQueueSourceArn
	hist         *history
}

// history outlives the message so tests can check receive counts and fates of
// deleted messages.
type history struct {
	ReceiveCount int
	Fate         string // "", "deleted", "expired", "purged", "moved"
}

type entry struct {
	m   *message
	gen uint64
	at  time.Time
}

type entryHeap []entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type redrivePolicy struct {
	DeadLetterTargetArn string
	MaxReceiveCount     int
}

type queueAttrs struct {
	delay      int // seconds
	maxSize    int // bytes
	retention  int // seconds
	wait       int // seconds
	visibility int // seconds
	redrive    *redrivePolicy
	redriveRaw string
	other      map[string]string // stored verbatim (Policy, KMS, ...)
}

type queue struct {
	name     string
	arn      string
	attrs    queueAttrs
	created  time.Time
	modified time.Time

	msgs    map[string]*message
	hist    map[string]*history
	visible []entry // FIFO of visible messages (best-effort order, as SQS)
	head    int
	waiting entryHeap // in-flight and delayed messages by visibleAt
	expiry  entryHeap // every live message by expireAt

	nVisible, nInflight, nDelayed int

	line      pollLine // the blocked long polls, the longest waiting first
	waiters   int      // long polls blocked now (line plus those woken and not yet back)
	lastPurge time.Time
	gone      bool
	stats     QueueStats
}

func newQueue(name, arn string, attrs queueAttrs, now time.Time) *queue {
	return &queue{
		name: name, arn: arn, attrs: attrs, created: now, modified: now,
		msgs: map[string]*message{}, hist: map[string]*history{},
	}
}

// passOn wakes the next poll in line when a receive leaves with messages
// still visible: the wake it had may have been for one of those. With
// none visible but some hidden, it wakes the poll now first in line if
// that one has not been woken, so that it sets its timer from them: the
// one that left may have been the only poll whose timer did.
func (q *queue) passOn() {
	if q.nVisible > 0 {
		q.line.wakeFirst()
	} else if len(q.waiting) > 0 {
		q.line.wakeHead()
	}
}

func (q *queue) pushVisible(m *message) {
	m.state = stateVisible
	m.gen++
	q.nVisible++
	if q.head > 0 && q.head*2 >= len(q.visible) {
		n := copy(q.visible, q.visible[q.head:])
		clear(q.visible[n:])
		q.visible = q.visible[:n]
		q.head = 0
	}
	q.visible = append(q.visible, entry{m: m, gen: m.gen})
	q.line.wakeFirst()
}

func (q *queue) popVisible() *message {
	for q.head < len(q.visible) {
		e := q.visible[q.head]
		q.visible[q.head] = entry{}
		q.head++
		if e.m.gen == e.gen && e.m.state == stateVisible {
			return e.m
		}
	}
	return nil
}

func (q *queue) leave(m *message) {
	switch m.state {
	case stateVisible:
		q.nVisible--
	case stateInflight:
		q.nInflight--
	case stateDelayed:
		q.nDelayed--
	}
}

// hide makes m in-flight (or delayed) until at.
// A poll waiting in line set its timer from the earliest hidden message
// when it began to wait (nextWake); a message hidden since then that is
// visible sooner wakes the first poll in line, which sets its timer again.
// Without that it stayed asleep until its wait time ended (up to 20 s)
// though the message was visible: a lifecycle notification received by a
// poll its client had just cancelled, hidden for a second, reached the
// agent's next poll only after the drain it belonged to had ended.
func (q *queue) hide(m *message, st msgState, at time.Time) {
	q.leave(m)
	m.state = st
	m.visibleAt = at
	m.gen++
	if st == stateInflight {
		q.nInflight++
	} else {
		q.nDelayed++
	}
	sooner := len(q.waiting) == 0 || at.Before(q.waiting[0].at)
	heap.Push(&q.waiting, entry{m: m, gen: m.gen, at: at})
	if sooner {
		q.line.wakeHead()
	}
}

func (q *queue) remove(m *message, fate string) {
	q.leave(m)
	m.state = stateGone
	m.gen++
	delete(q.msgs, m.id)
	m.hist.Fate = fate
}

func (q *queue) add(m *message, now time.Time, delay time.Duration) {
	q.msgs[m.id] = m
	if m.hist == nil {
		m.hist = &history{}
	}
	m.hist.ReceiveCount = m.receiveCount
	q.hist[m.id] = m.hist
	heap.Push(&q.expiry, entry{m: m, at: m.expireAt})
	if delay > 0 {
		m.state = stateVisible // so hide does not decrement anything
		q.nVisible++
		q.hide(m, stateDelayed, now.Add(delay))
		return
	}
	q.pushVisible(m)
}

// settle applies everything that is due at now: in-flight and delayed
// messages become visible, messages past the retention period are deleted.
func (q *queue) settle(now time.Time) {
	for len(q.waiting) > 0 && !q.waiting[0].at.After(now) {
		e := heap.Pop(&q.waiting).(entry)
		if e.m.gen != e.gen || (e.m.state != stateInflight && e.m.state != stateDelayed) {
			continue
		}
		q.leave(e.m)
		q.pushVisible(e.m)
	}
	for len(q.expiry) > 0 && !q.expiry[0].at.After(now) {
		e := heap.Pop(&q.expiry).(entry)
		if e.m.state == stateGone {
			continue
		}
		q.remove(e.m, "expired")
		q.stats.Expired++
	}
	// Compact so the heaps do not grow without bound under churn.
	if n := len(q.waiting); n > 1024 && n > 2*(q.nInflight+q.nDelayed) {
		live := q.waiting[:0]
		for _, e := range q.waiting {
			if e.m.gen == e.gen && (e.m.state == stateInflight || e.m.state == stateDelayed) {
				live = append(live, e)
			}
		}
		clear(q.waiting[len(live):])
		q.waiting = live
		heap.Init(&q.waiting)
	}
	if n := len(q.expiry); n > 1024 && n > 2*len(q.msgs) {
		live := q.expiry[:0]
		for _, e := range q.expiry {
			if e.m.state != stateGone {
				live = append(live, e)
			}
		}
		clear(q.expiry[len(live):])
		q.expiry = live
		heap.Init(&q.expiry)
	}
}

// nextWake is when the next in-flight or delayed message becomes visible.
func (q *queue) nextWake() (time.Time, bool) {
	if len(q.waiting) == 0 {
		return time.Time{}, false
	}
	return q.waiting[0].at, true
}

func (q *queue) visibility() time.Duration { return time.Duration(q.attrs.visibility) * time.Second }
