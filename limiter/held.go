package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Done gives back what the run of r holds (its concurrency slots) and
// records its outcome for the failure breakers of the rules that allowed
// it: the matched enforced rule and every matching shadow rule. Call it once
// when the run ends, with one of the Outcome* constants (or any other
// outcome, such as "released", which only gives back). It finds the slots
// and the probe by r.TaskID; r must carry the same Host, Diagnostic and
// Severity as when it was allowed. Done bypasses the Redis-outage breaker,
// bounds the call by Options.Timeout and returns the backend's error: a slot
// it could not give back lapses with the lease.
func (l *Limiter) Done(ctx context.Context, r Request, outcome string) error {
	h := doneOp(outcome)
	return l.held(ctx, &r, &h, "done")
}

// Renew extends what the run of r holds (its concurrency slots and breaker
// probe) to lease from now; call it when the task's lease is renewed. A slot
// that has already lapsed is not taken again.
func (l *Limiter) Renew(ctx context.Context, r Request, lease time.Duration) error {
	if lease <= 0 {
		lease = DefaultLease
	}
	h := heldOp{}
	h.leaseUntil = l.clock.Now().Add(lease).UnixMicro()
	return l.held(ctx, &r, &h, "renew")
}

// ScriptCall is one Redis script call for a caller to send in a round
// trip of its own (DoneCalls): run it with Script.EvalSha on a pipeline,
// or Script.Run.
type ScriptCall struct {
	Script *redis.Script
	// Source is Script's Lua source, for a caller that runs the call
	// inside a script of its own (the agent's finish on one node).
	Source string
	Keys   []string
	Args   []any
}

// DoneCalls is Done as the script calls it would make, for a caller that
// sends them in a round trip it makes anyway (the agent: the pipeline of
// the task's final record, on the same Redis client as the limiter's
// backend). ok is false when the backend is not Redis: call Done then.
// calls is empty when the run holds nothing to give back or count. The
// caller sends the calls at most once: a second send would count a failed
// run twice for the breakers; a call that fails leaves its slots to lapse
// with the lease, as Done's would.
func (l *Limiter) DoneCalls(r Request, outcome string) (calls []ScriptCall, ok bool) {
	b, ok := l.backend.(*Redis)
	if !ok {
		return nil, false
	}
	h := doneOp(outcome)
	if !l.heldOpFor(&r, &h) {
		return nil, true
	}
	return b.heldCalls(&h), true
}

func doneOp(outcome string) heldOp {
	h := heldOp{done: true, outcome: heldNeutral}
	switch outcome {
	case OutcomeSucceeded:
		h.outcome = heldSucceeded
	case OutcomeFailed, OutcomeTimedOut:
		h.outcome = heldFailed
	}
	return h
}

func (l *Limiter) held(ctx context.Context, r *Request, h *heldOp, what string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !l.heldOpFor(r, h) {
		return nil
	}
	if err := l.backend.held(ctx, h, l.timeout); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("limiter: %s %s: %w", what, r.TaskID, err)
	}
	return nil
}

// heldOpFor fills h's time, task and rules for r; false when no rule
// that applies to r holds anything.
func (l *Limiter) heldOpFor(r *Request, h *heldOp) bool {
	now := l.clock.Now()
	h.now, h.task = now.UnixMicro(), r.TaskID
	var buf [4]*compiledRule
	rules := buf[:0]
	if cr := l.match(r); cr != nil {
		rules = append(rules, cr)
	}
	rules = l.matchShadows(rules, r)
	for _, cr := range rules {
		if cr.holds() {
			h.rules = append(h.rules, ruleOp{})
			l.ruleOpFor(&h.rules[len(h.rules)-1], cr, r, now)
		}
	}
	return len(h.rules) > 0
}

// RuleState is the live state of one rule's concurrency slots and failure
// breaker for one key, as `autodiag limits check` shows it.
type RuleState struct {
	Rule   string
	Shadow bool
	Key    string // the limited key's value, e.g. the host
	// Concurrency is the rule's limit (0: none); Holders the runs holding
	// a slot, earliest lease expiry first.
	Concurrency int
	// MaxPercent is the share of a max_percent cap (Concurrency is then
	// 0: the cap follows the agents in service).
	MaxPercent float64
	Holders    []Holder
	// Breaker is "" (the rule has none), "closed", "open", "half_open"
	// (the next allowed run is the probe) or "probing".
	Breaker    string
	Failures   int       // failures within the window, while closed
	OpenUntil  time.Time // while open
	Probe      string    // task id of the probe, while probing
	ProbeUntil time.Time // its lease expiry
}

// Holder is a run holding a concurrency slot.
type Holder struct {
	TaskID  string
	Expires time.Time // its lease expiry: the slot frees then unless renewed
}

// Inspect returns the live state of the concurrency slots and failure
// breakers of every rule that would apply to r (the first matching enforced
// rule, then the matching shadow rules), reading without writing. Rules with
// neither are left out. Like Check, it returns a backend error instead of
// degrading.
func (l *Limiter) Inspect(ctx context.Context, r Request) ([]RuleState, error) {
	var buf [4]*compiledRule
	rules := buf[:0]
	if cr := l.match(&r); cr != nil {
		rules = append(rules, cr)
	}
	rules = l.matchShadows(rules, &r)
	now := l.clock.Now()
	var out []RuleState
	for _, cr := range rules {
		if !cr.holds() {
			continue
		}
		var ro ruleOp
		l.ruleOpFor(&ro, cr, &r, now)
		st, err := l.backend.inspect(ctx, ro.tag, &ro, now.UnixMicro(), l.timeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("limiter: inspect %s %s: %w", cr.name, ro.tag, err)
		}
		rs := RuleState{Rule: cr.name, Shadow: cr.shadow, Key: ro.tag, Concurrency: cr.conc, Holders: st.holders}
		if cr.concPct > 0 {
			// The cap follows the agents in service: Check's counters say it.
			rs.Concurrency, rs.MaxPercent = 0, float64(cr.concPct)/100
		}
		if cr.brkFail > 0 {
			rs.Breaker = "closed"
			switch {
			case st.openUntil == 0:
				lo := now.UnixMicro() - cr.brkWin
				for _, f := range st.failures {
					if f > lo {
						rs.Failures++
					}
				}
			case st.openUntil > now.UnixMicro():
				rs.Breaker, rs.OpenUntil = "open", time.UnixMicro(st.openUntil)
			case st.probe != "" && st.probeUntil > now.UnixMicro():
				rs.Breaker, rs.Probe, rs.ProbeUntil = "probing", st.probe, time.UnixMicro(st.probeUntil)
			default:
				rs.Breaker = "half_open"
			}
		}
		out = append(out, rs)
	}
	return out, nil
}
