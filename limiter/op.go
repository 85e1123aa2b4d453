package limiter

import (
	"context"
	"sync/atomic"
	"time"
)

// Backend stores the limiter's state and makes one decision atomically.
// NewRedis and NewMemory return the two implementations; the interface is
// sealed so that both keep the exact same semantics (the conformance suite
// runs against both).
type Backend interface {
	// eval evaluates (and, unless o.dry, applies) one decision atomically.
	// timeout bounds a remote call; a local backend ignores it.
	eval(ctx context.Context, o *op, timeout time.Duration) (result, error)
	// held renews (h.done false) or gives back (h.done true) what a run
	// holds, and records its outcome for the breakers.
	held(ctx context.Context, h *heldOp, timeout time.Duration) error
	// inspect reads the concurrency slots and breaker of one rule and key.
	inspect(ctx context.Context, tag string, rr *ruleOp, now int64, timeout time.Duration) (ruleState, error)
}

// op is everything a backend needs for one decision. Times are Unix
// microseconds from the limiter's Clock, durations are microseconds; a zero
// limit field means the rule does not have that limit.
type op struct {
	dry        bool
	now        int64
	host       string
	diag       string
	dedupeID   string // "" = no dedupe for this task
	dedupeTTL  int64
	task       string // slot member and probe id
	leaseUntil int64  // expiry of a slot or probe taken now
	member     uint64 // unique id of this decision (member of a window ZSET)
	// enforced: rules[0] is the enforced rule (or the dedupe-only pseudo
	// rule of an unmatched task) and its verdict decides whether the task
	// runs; false: every rule is a shadow and runs says it.
	enforced bool
	runs     bool
	rules    []ruleOp
	// ruleBuf and outBuf hold the rules and the backend's answer of a
	// decision with up to two rules, so that one allocation (the op, which
	// the call through Backend takes to the heap) covers them.
	ruleBuf [2]ruleOp
	outBuf  [2]ruleResult
}

// results returns a slice for n rule results, in o.outBuf when it fits.
func (o *op) results(n int) []ruleResult {
	if n <= len(o.outBuf) {
		clear(o.outBuf[:n])
		return o.outBuf[:n]
	}
	return make([]ruleResult, n)
}

// ruleOp is one rule of a decision, for one key.
type ruleOp struct {
	tag      string // hash tag: the limited key's value
	rule     string // "" for the dedupe-only pseudo rule of an unmatched task
	block    int64
	daily    int
	day      string // local calendar day, YYYYMMDD
	dayNum   int64  // the same day as a number
	dailyTTL int64  // until the next local midnight
	minIvl   int64
	winCount int
	winPer   int64
	rateT    int64
	rateCap  int
	conc     int
	// concPct is a max_percent cap (hundredths of a percent): conc is
	// then computed from the agents in service under inSvc (a sorted set
	// read by the script) or, when agents >= 0, from agents as counted
	// before the call (on a Cluster, where the set is in another slot).
	concPct    int64
	inSvc      string
	agents     int64
	slotSuffix string // the concurrency slots' key suffix per asg or az
	brkFail    int
	brkWin     int64
	brkOpen    int64
	order      string // limit codes (d m w r c) in configuration order
}

// hasState reports whether the rule keeps the packed state (a limit other
// than concurrency, or a block).
func (r *ruleOp) hasState() bool {
	return r.block > 0 || r.daily > 0 || r.minIvl > 0 || r.winCount > 0 || r.rateT > 0
}

// Result statuses.
const (
	statusDenied    = 0
	statusAllowed   = 1
	statusDuplicate = 2
)

// result is a backend's answer: one ruleResult per rule of the op, or one
// with statusDuplicate.
type result struct {
	rules []ruleResult
}

// ruleResult is one rule's answer; counters are after the decision.
type ruleResult struct {
	status    int
	limit     byte  // code of the denying limit: f b d m w r c, or 0
	retry     int64 // µs
	dailyUsed int64
	since     int64 // µs since the last allowed run, -1 if none within min_interval
	winCount  int64
	level     int64 // µs of backlog in the bucket (level*rateT)
	holders   int64 // concurrency slots held after the decision
	probe     bool  // the run is the breaker's probe
	concLimit int64 // a max_percent cap: the slots it allows now
	agents    int64 // a max_percent cap: the agents in service counted
}

// Outcome codes of heldOp.
const (
	heldSucceeded = 0
	heldFailed    = 1
	heldNeutral   = 2
)

// heldOp renews or gives back what a run holds in rules.
type heldOp struct {
	now        int64
	done       bool
	outcome    int   // held* code, when done
	leaseUntil int64 // when renewing
	task       string
	rules      []ruleOp // only those with concurrency or a breaker
}

// ruleState is what inspect reads.
type ruleState struct {
	holders    []Holder
	openUntil  int64
	probe      string
	probeUntil int64
	failures   []int64
}

// dayInfo caches the bounds of the current local calendar day.
type dayInfo struct {
	start, end int64 // µs, [start, end)
	stamp      string
	num        int64 // stamp as a number
}

// calendar is the operational time zone's days: the daily quotas reset
// at its local midnight.
type calendar struct {
	loc *time.Location
	day atomic.Pointer[dayInfo] // the last day asked for
}

// dayOf returns the local calendar day containing now.
func (c *calendar) dayOf(now time.Time) *dayInfo {
	us := now.UnixMicro()
	if d := c.day.Load(); d != nil && us >= d.start && us < d.end {
		return d
	}
	start, end := dayBounds(now, c.loc)
	y, m, dd := start.In(c.loc).Date()
	d := &dayInfo{start: start.UnixMicro(), end: end.UnixMicro(), stamp: start.In(c.loc).Format("20060102"),
		num: int64(y)*10000 + int64(m)*100 + int64(dd)}
	if us >= d.start && us < d.end {
		c.day.Store(d)
	}
	return d
}

// dayBounds returns the first instant of the local day containing t and the
// first instant of the next one. Days are 23 or 25 hours long across DST
// changes, and when a DST change skips midnight the day starts at the first
// instant that exists (time.Date may normalise into the previous day there).
func dayBounds(t time.Time, loc *time.Location) (time.Time, time.Time) {
	lt := t.In(loc)
	y, m, d := lt.Date()
	return dayStart(y, m, d, loc), dayStart(y, m, d+1, loc)
}

func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	s := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // normalised y-m-d
	for range 3 {
		sy, sm, sd := s.Date()
		if sy == want.Year() && sm == want.Month() && sd == want.Day() {
			break
		}
		// s is still on the previous day: the day starts where its zone period ends.
		_, end := s.ZoneBounds()
		if end.IsZero() || !end.After(s) {
			break
		}
		s = end.In(loc)
	}
	return s
}

// ruleOpFor fills o for request r under rule cr at time now.
func (l *Limiter) ruleOpFor(o *ruleOp, cr *compiledRule, r *Request, now time.Time) {
	o.tag = tagOf(cr.key, r)
	if cr.idx > 0 {
		o.rule = cr.name
	}
	o.block = cr.block
	if cr.daily > 0 {
		d := l.days.dayOf(now)
		o.daily, o.day, o.dayNum, o.dailyTTL = cr.daily, d.stamp, d.num, d.end-now.UnixMicro()
	}
	o.minIvl = cr.minIvl
	o.winCount, o.winPer = cr.winCount, cr.winPer
	o.rateT, o.rateCap = cr.rateT, cr.rateCap
	o.conc = cr.conc
	o.concPct, o.agents, o.inSvc, o.slotSuffix = cr.concPct, -1, "", ""
	if cr.concPct > 0 {
		value := ""
		switch cr.concPer {
		case PerASG:
			value = l.asg
		case PerAZ:
			value = l.az
		}
		o.inSvc = InServiceKey("", cr.concPer, value)
		if cr.concPer != PerFleet {
			o.slotSuffix = ":" + cr.concPer + ":" + value
		}
	}
	o.brkFail, o.brkWin, o.brkOpen = cr.brkFail, cr.brkWin, cr.brkOpen
	o.order = cr.order
}

// tagOf returns the hash tag of a request under key kind key.
func tagOf(key string, r *Request) string {
	var tag string
	switch key {
	case KeyDiagnostic:
		tag = r.Diagnostic
	case KeyHostDiagnostic:
		tag = r.Host + "|" + r.Diagnostic
	case KeyGlobal:
		tag = KeyGlobal
	default:
		tag = r.Host
	}
	if tag == "" {
		tag = "_"
	}
	return tag
}
