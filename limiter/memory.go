package limiter

import (
	"context"
	"slices"
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
	slots      map[string]int64 // task id -> lease expiry
	// failure breaker (the :f: hash)
	open       int64 // open until, 0 = closed
	probe      string
	probeUntil int64
	fails      []int64
	brkExp     int64 // when the breaker's state is forgotten (the hash's TTL)
}

// sweepEvery is how often (on the limiter's clock) expired entries are dropped.
const sweepEvery = int64(time.Minute / time.Microsecond)

// NewMemory returns an empty in-memory backend.
func NewMemory() *Memory {
	return &Memory{rules: make(map[memKey]*memState), dedupe: make(map[dedupeKey]int64)}
}

// memCheck is one rule's evaluation before it is applied.
type memCheck struct {
	st      *memState
	stored  bool
	res     ruleResult
	blocked bool // blocked or failing: a denial sets no new block
	first   int  // first window entry still inside
	tat     int64
	mine    bool // the task already holds a slot
}

func (m *Memory) eval(_ context.Context, o *op, _ time.Duration) (result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := o.now
	if now >= m.nextSweep {
		m.sweep(now)
	}
	var dk dedupeKey
	if o.dedupeID != "" {
		dk = dedupeKey{o.rules[0].tag, o.host, o.diag, o.dedupeID}
		if until, ok := m.dedupe[dk]; ok && until > now {
			res := result{rules: o.results(1)}
			res.rules[0] = ruleResult{status: statusDuplicate, since: -1}
			return res, nil
		}
	}
	var buf [2]memCheck
	checks := buf[:0]
	if len(o.rules) > len(buf) {
		checks = make([]memCheck, 0, len(o.rules))
	}
	checks = checks[:len(o.rules)]
	for i := range o.rules {
		m.check(&checks[i], &o.rules[i], o)
	}
	runs := o.runs
	if o.enforced {
		runs = len(checks) == 0 || checks[0].res.status == statusAllowed
	}
	res := result{rules: o.results(len(o.rules))}
	for i := range o.rules {
		c := &checks[i]
		if o.dry {
			if !runs {
				c.res.probe = false
			}
		} else {
			m.apply(c, &o.rules[i], o, runs)
		}
		res.rules[i] = c.res
	}
	if !o.dry && runs && o.dedupeID != "" {
		m.dedupe[dk] = now + o.dedupeTTL
	}
	return res, nil
}

// check evaluates rule ro like allow.lua's check.
func (m *Memory) check(c *memCheck, ro *ruleOp, o *op) {
	now := o.now
	res := &c.res
	res.since = -1
	if ro.rule != "" {
		c.st = m.rules[memKey{ro.tag, ro.rule}]
	}
	c.stored = c.st != nil
	if !c.stored {
		c.st = &memState{}
	}
	st := c.st
	var denied uint8 // bits: limitBit(code)
	failing, blocked := false, false
	if ro.brkFail > 0 && st.brkExp > now && st.open > 0 {
		switch {
		case now < st.open:
			failing, res.retry = true, st.open-now
		case st.probeUntil > now && st.probe != o.task:
			failing, res.retry = true, max(st.probeUntil-now, int64(time.Second/time.Microsecond))
		default:
			res.probe = true
		}
	}
	if st.blockUntil > now {
		blocked = true
		res.retry = max(res.retry, st.blockUntil-now)
	}
	if ro.daily > 0 {
		if st.day == ro.day && st.dayExp > now {
			res.dailyUsed = st.dayCount
		}
		if res.dailyUsed >= int64(ro.daily) {
			denied |= limitBit('d')
			res.retry = max(res.retry, ro.dailyTTL)
		}
	}
	if ro.minIvl > 0 && st.last != 0 {
		since := now - st.last
		if since < ro.minIvl {
			res.since = since
			denied |= limitBit('m')
			res.retry = max(res.retry, ro.minIvl-since)
		}
	}
	if ro.winCount > 0 {
		lo := now - ro.winPer
		for c.first < len(st.win) && st.win[c.first] <= lo {
			c.first++
		}
		res.winCount = int64(len(st.win) - c.first)
		if res.winCount >= int64(ro.winCount) {
			denied |= limitBit('w')
			oldest := st.win[len(st.win)-ro.winCount]
			res.retry = max(res.retry, oldest+ro.winPer-now)
		}
	}
	c.tat = max(st.tat, now)
	if ro.rateT > 0 {
		res.level = c.tat - now
		if res.level+ro.rateT > ro.rateT*int64(ro.rateCap) {
			denied |= limitBit('r')
			res.retry = max(res.retry, res.level+ro.rateT-ro.rateT*int64(ro.rateCap))
		}
	}
	if ro.conc > 0 {
		conc := int64(ro.conc)
		if ro.concPct > 0 {
			// In process there is one agent, this one, unless the caller
			// counted them.
			res.agents = ro.agents
			if res.agents < 0 {
				res.agents = 1
			}
			conc = max(1, ro.concPct*res.agents/10000)
			res.concLimit = conc
		}
		first := int64(0)
		for _, exp := range st.slots {
			if exp > now {
				res.holders++
				if first == 0 || exp < first {
					first = exp
				}
			}
		}
		if st.slots[o.task] > now {
			c.mine = true
		} else if res.holders >= conc {
			denied |= limitBit('c')
			res.retry = max(res.retry, first-now, int64(time.Second/time.Microsecond))
		}
	}
	switch {
	case failing:
		res.limit = 'f'
	case blocked:
		res.limit = 'b'
	default:
		for i := 0; i < len(ro.order); i++ {
			if denied&limitBit(ro.order[i]) != 0 {
				res.limit = ro.order[i]
				break
			}
		}
	}
	c.blocked = blocked || failing
	if res.limit == 0 {
		res.status, res.retry = statusAllowed, 0
	}
}

// apply writes rule ro's part of the decision like allow.lua's apply.
func (m *Memory) apply(c *memCheck, ro *ruleOp, o *op, runs bool) {
	now, st, res := o.now, c.st, &c.res
	take := res.status == statusAllowed && runs
	write := false
	if ro.winCount > 0 && c.first > 0 {
		st.win = append(st.win[:0], st.win[c.first:]...)
	}
	if ro.conc > 0 {
		for id, exp := range st.slots {
			if exp <= now {
				delete(st.slots, id)
			}
		}
		if take {
			if st.slots == nil {
				st.slots = make(map[string]int64)
			}
			st.slots[o.task] = o.leaseUntil
			if !c.mine {
				res.holders++
			}
			write = true
		}
	}
	if ro.brkFail > 0 && res.probe {
		if take {
			if st.brkExp <= now { // forgotten: as an absent hash
				st.open, st.fails = 0, nil
			}
			st.probe, st.probeUntil = o.task, o.leaseUntil
			st.brkExp = o.leaseUntil + max(ro.brkOpen, ro.brkWin)
			write = true
		} else {
			res.probe = false
		}
	}
	if take {
		write = true
		st.blockUntil = 0
		if ro.daily > 0 {
			if st.day != ro.day || st.dayExp <= now {
				st.day, st.dayCount = ro.day, 0
			}
			st.dayCount++
			st.dayExp = now + ro.dailyTTL
			res.dailyUsed = st.dayCount
		}
		if ro.minIvl > 0 {
			st.last, st.lastExp = now, now+ro.minIvl
		}
		if ro.winCount > 0 {
			st.win = append(st.win, now)
			st.winExp = now + ro.winPer
			res.winCount++
		}
		if ro.rateT > 0 {
			st.tat = c.tat + ro.rateT
			res.level = st.tat - now
		}
	} else if res.status == statusDenied && ro.block > 0 && !c.blocked {
		write = true
		st.blockUntil = now + ro.block
		res.retry = max(res.retry, ro.block)
	}
	if !c.stored && ro.rule != "" && write {
		m.rules[memKey{ro.tag, ro.rule}] = st
	}
}

func (m *Memory) held(_ context.Context, h *heldOp, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := h.now
	for i := range h.rules {
		ro := &h.rules[i]
		st := m.rules[memKey{ro.tag, ro.rule}]
		if st == nil {
			if !h.done || h.outcome != heldFailed || ro.brkFail == 0 {
				continue
			}
			st = &memState{}
			m.rules[memKey{ro.tag, ro.rule}] = st
		}
		if ro.conc > 0 {
			if !h.done {
				if st.slots[h.task] > now {
					st.slots[h.task] = h.leaseUntil
				}
			} else {
				delete(st.slots, h.task)
			}
		}
		if ro.brkFail == 0 {
			continue
		}
		keep := max(ro.brkOpen, ro.brkWin)
		if st.brkExp <= now { // forgotten: as an absent hash
			st.open, st.probe, st.probeUntil, st.fails = 0, "", 0, nil
		}
		probe := st.probe == h.task
		switch {
		case !h.done:
			if probe && st.probeUntil > now {
				st.probeUntil = h.leaseUntil
				st.brkExp = h.leaseUntil + keep
			}
		case probe && h.outcome == heldSucceeded:
			st.open, st.probe, st.probeUntil, st.fails, st.brkExp = 0, "", 0, nil, 0
		case probe && h.outcome == heldFailed:
			st.open, st.probe, st.probeUntil, st.fails = now+ro.brkOpen, "", 0, nil
			st.brkExp = now + ro.brkOpen + keep
		case probe:
			st.probe, st.probeUntil = "", 0
		case h.outcome == heldFailed && st.open == 0:
			kept := st.fails[:0]
			for _, t := range st.fails {
				if t > now-ro.brkWin {
					kept = append(kept, t)
				}
			}
			kept = append(kept, now)
			if len(kept) >= ro.brkFail {
				st.open, st.probe, st.probeUntil, st.fails = now+ro.brkOpen, "", 0, nil
				st.brkExp = now + ro.brkOpen + keep
			} else {
				st.fails = kept
				st.brkExp = now + ro.brkWin
			}
		}
	}
	return nil
}

func (m *Memory) inspect(_ context.Context, tag string, ro *ruleOp, now int64, _ time.Duration) (ruleState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs ruleState
	st := m.rules[memKey{tag, ro.rule}]
	if st == nil {
		return rs, nil
	}
	for id, exp := range st.slots {
		if exp > now {
			rs.holders = append(rs.holders, Holder{TaskID: id, Expires: time.UnixMicro(exp)})
		}
	}
	slices.SortFunc(rs.holders, func(a, b Holder) int { return a.Expires.Compare(b.Expires) })
	if st.brkExp > now {
		rs.openUntil, rs.probe, rs.probeUntil = st.open, st.probe, st.probeUntil
		rs.failures = slices.Clone(st.fails)
	}
	return rs, nil
}

// sweep drops entries whose every part has expired at now.
func (m *Memory) sweep(now int64) {
	m.nextSweep = now + sweepEvery
	for k, st := range m.rules {
		for id, exp := range st.slots {
			if exp <= now {
				delete(st.slots, id)
			}
		}
		if st.dayExp <= now && st.lastExp <= now && st.winExp <= now && st.tat <= now && st.blockUntil <= now &&
			len(st.slots) == 0 && st.brkExp <= now {
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

// limitBit maps a limit code (d m w r c) to a bit.
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
	case 'c':
		return 16
	}
	return 0
}
