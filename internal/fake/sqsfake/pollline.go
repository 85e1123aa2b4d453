package sqsfake

import (
	"cmp"
	"slices"
)

// poll is one ReceiveMessage long poll waiting on a queue.
type poll struct {
	place uint64        // when it first waited, in the line's count of polls
	wake  chan struct{} // 1 buffered: wakeFirst's word that it should look again
	woken bool          // wakeFirst woke it; it stays in line until it unparks
}

// pollLine is the long polls blocked on one queue, the longest waiting
// first. Each message that becomes visible wakes the first poll in line
// not woken yet. A woken poll keeps its place until it runs, so that a
// poll its timer woke meanwhile still finds it ahead.
// SQS documents no order among long polls. Waking every poll at once let
// Go's scheduler pick, and it runs the goroutine readied last first: the
// newest poll, so the consumer that came back quickest took the next
// message again (in scripts/fleetsim the busiest of 200 agents ran 9-14
// times an even share of each 10 s).
type pollLine struct {
	polls []*poll
	count uint64 // polls that have waited so far: the next one's place
}

// newPoll is a poll that takes its place behind every one so far.
func (l *pollLine) newPoll() *poll {
	l.count++
	return &poll{place: l.count, wake: make(chan struct{}, 1)}
}

// wakeFirst wakes the poll that has waited longest of those not woken yet.
func (l *pollLine) wakeFirst() {
	for _, p := range l.polls {
		if !p.woken {
			wake(p)
			return
		}
	}
}

// wakeHead wakes the first poll in line unless it is woken already: it
// looks again and, finding nothing, waits again with its timer set from
// what is hidden now (the messages' order of service is unchanged).
func (l *pollLine) wakeHead() {
	if len(l.polls) > 0 && !l.polls[0].woken {
		wake(l.polls[0])
	}
}

// wakeAll wakes every waiting poll (the queue is gone).
func (l *pollLine) wakeAll() {
	for _, p := range l.polls {
		if !p.woken {
			wake(p)
		}
	}
}

func wake(p *poll) {
	p.woken = true
	p.wake <- struct{}{} // buffered, and empty while p is not woken
}

// park puts p in line at its place: a poll that woke and found nothing
// keeps the place it had.
func (l *pollLine) park(p *poll) {
	i, _ := l.find(p)
	l.polls = slices.Insert(l.polls, i, p)
}

// unpark takes p out of line and reports whether it is behind: its timer
// (not wakeFirst) woke it, and polls that waited longer are still in line,
// woken or not, so what became visible is theirs.
func (l *pollLine) unpark(p *poll) (behind bool) {
	i, _ := l.find(p)
	l.polls = slices.Delete(l.polls, i, i+1)
	if !p.woken {
		return i > 0
	}
	p.woken = false
	select { // wakeFirst's word, if the poll woke by something else first
	case <-p.wake:
	default:
	}
	return false
}

// find is where p stands in line, or would stand, and whether it is there.
func (l *pollLine) find(p *poll) (int, bool) {
	return slices.BinarySearchFunc(l.polls, p.place, func(x *poll, place uint64) int { return cmp.Compare(x.place, place) })
}
