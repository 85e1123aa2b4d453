package limiter

import (
	"context"
	"time"
)

// Backend stores the limiter's state and makes one decision atomically.
// NewRedis and NewMemory return the two implementations; the interface is
// sealed so that both keep the exact same semantics (the conformance suite
// runs against both).
type Backend interface {
	// eval evaluates (and, unless o.dry, applies) one decision atomically.
	// timeout bounds a remote call; a local backend ignores it.
	eval(ctx context.Context, o op, timeout time.Duration) (result, error)
}

// op is everything a backend needs for one decision. Times are Unix
// microseconds from the limiter's Clock, durations are microseconds; a zero
// limit field means the rule does not have that limit.
type op struct {
	dry       bool
	now       int64
	tag       string // hash tag: the limited key's value
	rule      string // "" for the dedupe-only decision of an unmatched task
	host      string
	diag      string
	dedupeID  string // "" = no dedupe for this task
	dedupeTTL int64
	block     int64
	daily     int
	day       string // local calendar day, YYYYMMDD
	dayNum    int64  // the same day as a number
	dailyTTL  int64  // until the next local midnight
	minIvl    int64
	winCount  int
	winPer    int64
	rateT     int64
	rateCap   int
	order     string // limit codes (d m w r) in configuration order
	member    uint64 // unique id of this decision (member of a window ZSET)
}

// Result statuses.
const (
	statusDenied    = 0
	statusAllowed   = 1
	statusDuplicate = 2
)

// result is a backend's answer; counters are after the decision.
type result struct {
	status    int
	limit     byte  // code of the denying limit: b d m w r, or 0
	retry     int64 // µs
	dailyUsed int64
	since     int64 // µs since the last allowed run, -1 if none within min_interval
	winCount  int64
	level     int64 // µs of backlog in the bucket (level*rateT)
}

// dayInfo caches the bounds of the current local calendar day.
type dayInfo struct {
	start, end int64 // µs, [start, end)
	stamp      string
	num        int64 // stamp as a number
}

// dayOf returns the local calendar day containing now.
func (l *Limiter) dayOf(now time.Time) *dayInfo {
	us := now.UnixMicro()
	if d := l.day.Load(); d != nil && us >= d.start && us < d.end {
		return d
	}
	start, end := dayBounds(now, l.loc)
	y, m, dd := start.In(l.loc).Date()
	d := &dayInfo{start: start.UnixMicro(), end: end.UnixMicro(), stamp: start.In(l.loc).Format("20060102"),
		num: int64(y)*10000 + int64(m)*100 + int64(dd)}
	if us >= d.start && us < d.end {
		l.day.Store(d)
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

// buildOp fills o for request r under rule cr at time now.
func (l *Limiter) buildOp(o *op, cr *compiledRule, r *Request, now time.Time, dry bool) {
	o.dry = dry
	o.now = now.UnixMicro()
	o.host, o.diag = r.Host, r.Diagnostic
	switch cr.key {
	case KeyDiagnostic:
		o.tag = r.Diagnostic
	case KeyHostDiagnostic:
		o.tag = r.Host + "|" + r.Diagnostic
	case KeyGlobal:
		o.tag = KeyGlobal
	default:
		o.tag = r.Host
	}
	if o.tag == "" {
		o.tag = "_"
	}
	if cr.idx > 0 {
		o.rule = cr.name
	}
	if l.dedupe > 0 && r.DedupeKey != "" {
		o.dedupeID, o.dedupeTTL = r.DedupeKey, l.dedupe
	}
	o.block = cr.block
	if cr.daily > 0 {
		d := l.dayOf(now)
		o.daily, o.day, o.dayNum, o.dailyTTL = cr.daily, d.stamp, d.num, d.end-o.now
	}
	o.minIvl = cr.minIvl
	o.winCount, o.winPer = cr.winCount, cr.winPer
	o.rateT, o.rateCap = cr.rateT, cr.rateCap
	o.order = cr.order
	if cr.winCount > 0 {
		o.member = l.salt ^ l.seq.Add(1)*0x9E3779B97F4A7C15
	}
}
