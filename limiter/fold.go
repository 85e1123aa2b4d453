package limiter

import (
	"context"
	"fmt"
)

// Folded is one decision prepared to run inside a script call of another
// component on the same Redis server (the agent's claim), so that both
// cost one round trip: Source is allow.lua, run with Keys and Args;
// Resolve turns its reply into the Decision. The caller runs it at most
// once, and calls Resolve only when it ran.
type Folded struct {
	Source string
	Keys   []string
	Args   []any

	l       *Limiter
	r       Request
	cr      *compiledRule
	matched bool
	shadows []*compiledRule
	o       op
}

// Fold prepares the decision of r (what Allow would decide) to run in the
// caller's script call. ok is false when it cannot, and Allow is the way:
// the backend is not one Redis server (on a Cluster the limiter's keys
// live in other slots than the caller's), the decision asks nothing of
// the backend (no limits), or the Redis-outage breaker is not closed (its
// fail mode or its probe decides, as Allow does).
func (l *Limiter) Fold(r Request) (*Folded, bool) {
	b, ok := l.backend.(*Redis)
	if !ok || b.split || !l.breaker.closed() {
		return nil, false
	}
	f := &Folded{Source: allowLua, l: l, r: r}
	f.cr = l.match(&f.r)
	f.matched = f.cr != nil
	f.shadows = l.matchShadows(nil, &f.r)
	dedupe := r.DedupeKey != "" && l.dedupe > 0
	if !f.matched {
		f.cr = &l.none
	}
	if f.cr.order == "" && f.cr.brkFail == 0 && !dedupe && len(f.shadows) == 0 {
		return nil, false
	}
	l.opFor(&f.o, &f.r, f.cr, f.shadows, dedupe, false, l.clock.Now())
	f.Keys, f.Args = b.encode(&f.o, f.o.rules)
	return f, true
}

// Resolve is the decision from reply, what allow.lua answered in the
// caller's script call; it records the decision (metrics, logs) as Allow
// does. A reply it cannot read is an error (ErrBadReply).
func (f *Folded) Resolve(ctx context.Context, reply any) (Decision, error) {
	l := f.l
	s, ok := reply.(string)
	if !ok {
		return Decision{}, fmt.Errorf("limiter: decide %s: %w: %T", f.o.rules[0].tag, ErrBadReply, reply)
	}
	if b, ok := l.backend.(*Redis); ok {
		b.calls.Add(1)
	}
	res, err := parseReply(s, make([]ruleResult, len(f.o.rules)))
	if err != nil {
		return Decision{}, fmt.Errorf("limiter: decide %s: %w", f.o.rules[0].tag, err)
	}
	l.breaker.success()
	return l.settle(ctx, &f.r, f.cr, f.matched, f.shadows, &f.o, &res, false)
}
