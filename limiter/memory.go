package limiter

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process backend for embedded mode (one agent): the same
// semantics as the Redis backend, state kept in maps under one mutex, expired
// entries swept lazily. Times come from the limiter's Clock.
type Memory struct {
	mu        sync.Mutex
	rules     map[memKey]*memState
	dedupe    map[dedupeKey]int64 // until (µs)
	nextSweep int64
}

var _ Backend = (*Memory)(nil)

type memKey struct{ tag, rule string }

type dedupeKey struct{ tag, host, diag, id string }

// memState mirrors the Redis keys of one (tag, rule).
type memState struct {
	day        string
	dayCount   int64
	dayExp     int64
	last       int64 // µs of the last allowed run, 0 = none
	lastExp    int64
	win        []int64 // allowed runs in the window, ascending
	winExp     int64
	tat        int64 // theoretical arrival time of the bucket
	blockUntil int64
}

// sweepEvery is how often (on the limiter's clock) expired entries are dropped.
const sweepEvery = int64(time.Minute / time.Microsecond)

// NewMemory returns an empty in-memory backend.
func NewMemory() *Memory {
	return &Memory{rules: make(map[memKey]*memState), dedupe: make(map[dedupeKey]int64)}
}

func (m *Memory) eval(_ context.Context, o op, _ time.Duration) (result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := o.now
	if now >= m.nextSweep {
		m.sweep(now)
	}
	res := result{since: -1}
	var dk dedupeKey
	if o.dedupeID != "" {
		dk = dedupeKey{o.tag, o.host, o.diag, o.dedupeID}
		if until, ok := m.dedupe[dk]; ok && until > now {
			res.status = statusDuplicate
			return res, nil
		}
	}
	var st *memState
	if o.rule != "" {
		st = m.rules[memKey{o.tag, o.rule}]
	}
	stored := st != nil
	if !stored {
		st = &memState{}
	}
	var denied uint8 // bits: limitBit(code)
	blocked := false
	if o.block > 0 && st.blockUntil > now {
		blocked = true
		res.retry = st.blockUntil - now
	}
	if o.daily > 0 {
		if st.day == o.day && st.dayExp > now {
			res.dailyUsed = st.dayCount
		}
		if res.dailyUsed >= int64(o.daily) {
			denied |= limitBit('d')
			res.retry = max(res.retry, o.dailyTTL)
		}
	}
	if o.minIvl > 0 && st.last != 0 {
		since := now - st.last
		if since < o.minIvl {
			res.since = since
			denied |= limitBit('m')
			res.retry = max(res.retry, o.minIvl-since)
		}
	}
	lo := now - o.winPer
	first := 0
	if o.winCount > 0 {
		for first < len(st.win) && st.win[first] <= lo {
			first++
		}
		res.winCount = int64(len(st.win) - first)
		if res.winCount >= int64(o.winCount) {
			denied |= limitBit('w')
			oldest := st.win[first+len(st.win)-first-o.winCount]
			res.retry = max(res.retry, oldest+o.winPer-now)
		}
	}
	tat := max(st.tat, now)
	if o.rateT > 0 {
		res.level = tat - now
		if res.level+o.rateT > o.rateT*int64(o.rateCap) {
			denied |= limitBit('r')
			res.retry = max(res.retry, res.level+o.rateT-o.rateT*int64(o.rateCap))
		}
	}
	if blocked {
		res.limit = 'b'
	} else {
		for i := 0; i < len(o.order); i++ {
			if denied&limitBit(o.order[i]) != 0 {
				res.limit = o.order[i]
				break
			}
		}
	}
	if res.limit == 0 {
		res.status, res.retry = statusAllowed, 0
	}
	if o.dry {
		return res, nil
	}
	if o.winCount > 0 && first > 0 {
		st.win = append(st.win[:0], st.win[first:]...)
	}
	if res.status == statusAllowed {
		if o.daily > 0 {
			if st.day != o.day || st.dayExp <= now {
				st.day, st.dayCount = o.day, 0
			}
			st.dayCount++
			st.dayExp = now + o.dailyTTL
			res.dailyUsed = st.dayCount
		}
		if o.minIvl > 0 {
			st.last, st.lastExp = now, now+o.minIvl
		}
		if o.winCount > 0 {
			st.win = append(st.win, now)
			st.winExp = now + o.winPer
			res.winCount++
		}
		if o.rateT > 0 {
			st.tat = tat + o.rateT
			res.level = st.tat - now
		}
		if o.dedupeID != "" {
			m.dedupe[dk] = now + o.dedupeTTL
		}
	} else if o.block > 0 && !blocked {
		st.blockUntil = now + o.block
		res.retry = max(res.retry, o.block)
	}
	if !stored && o.rule != "" && (res.status == statusAllowed || o.block > 0) {
		m.rules[memKey{o.tag, o.rule}] = st
	}
	return res, nil
}

// sweep drops entries whose every part has expired at now.
func (m *Memory) sweep(now int64) {
	m.nextSweep = now + sweepEvery
	for k, st := range m.rules {
		if st.dayExp <= now && st.lastExp <= now && st.winExp <= now && st.tat <= now && st.blockUntil <= now {
			delete(m.rules, k)
		}
	}
	for k, until := range m.dedupe {
		if until <= now {
			delete(m.dedupe, k)
		}
	}
}

// dailyTTL reports, for tests, how long the daily counter of (tag, rule) has
// left at now, and whether it exists.
func (m *Memory) dailyTTL(tag, rule string, now int64) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.rules[memKey{tag, rule}]
	if !ok || st.dayExp <= now {
		return 0, false
	}
	return time.Duration(st.dayExp-now) * time.Microsecond, true
}

// limitBit maps a limit code (d m w r) to a bit.
func limitBit(c byte) uint8 {
	switch c {
	case 'd':
		return 1
	case 'm':
		return 2
	case 'w':
		return 4
	case 'r':
		return 8
	}
	return 0
}
