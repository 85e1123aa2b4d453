package limiter

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// RuleExplanation is one rule normalised, as `autodiag limits explain`
// prints it (see String and WriteExplain): what a rate-limit calculator
// would say about it.
type RuleExplanation struct {
	Rule   string
	Match  string // human summary of the match
	Key    string // host | diagnostic | host+diagnostic | global
	Limits []LimitExplanation
	// PerSecond is the sustained rate the rule allows per key: the lowest of its limits
	// (+Inf when the rule has no limits).
	PerSecond float64
	// Burst is how many tasks for one key are allowed at once from a fresh
	// state: the lowest ceiling of its limits (-1 = unlimited).
	Burst int
	// DenialsStart says when the first denial happens for a burst of tasks.
	DenialsStart string
	Block        time.Duration
	OnExceed     string
	Fail         string
	Timezone     string
	// NextReset is the next local midnight after the explained time (when daily quotas reset).
	NextReset time.Time
	// Shadow: the rule never denies; it is evaluated besides the first
	// matching enforced rule and its would-be denials are counted.
	Shadow bool
	// Breaker describes the rule's failure breaker in words ("" none).
	Breaker string
	// ClusterCalls is how many EVALSHA a decision under this rule costs on
	// a Redis Cluster when every shadow rule that can match with it does:
	// 1, plus one per other key kind among those shadows (a shadow keyed
	// like the rule shares its hash slot). On standalone Redis it is 1.
	ClusterCalls int
	// ShadowsWith names those shadow rules (for an enforced rule).
	ShadowsWith []string
}

// LimitExplanation is one limit normalised.
type LimitExplanation struct {
	Kind      string  // daily | min_interval | window | rate
	Spec      string  // the limit as configured, normalised (e.g. "15 per 1s, burst x3")
	PerSecond float64 // sustained rate it allows
	Burst     int     // tasks allowed at once from a fresh state
	Denies    string  // when it denies
}

// Explain normalises every rule, in evaluation order, at time now.
func (l *Limiter) Explain(now time.Time) []RuleExplanation {
	_, next := dayBounds(now, l.days.loc)
	out := make([]RuleExplanation, 0, len(l.cfg.Rules))
	for i, r := range l.cfg.Rules {
		cr := l.compiled(i + 1)
		e := RuleExplanation{
			Rule: r.Name, Match: matchString(r.Match), Key: cr.key, PerSecond: math.Inf(1), Burst: -1,
			Block: r.Block, OnExceed: cr.onExceed, Fail: cr.fail, Timezone: l.cfg.Timezone, NextReset: next,
			Shadow: cr.shadow, ClusterCalls: 1,
		}
		if b := r.Breaker; b != nil {
			e.Breaker = fmt.Sprintf("opens after %d failed or timed_out runs within %s for one %s; "+
				"then denies (reason failing) for %s and lets one probe through: its success closes it, its failure reopens it",
				b.Failures, b.Window, cr.key, b.OpenFor)
		}
		if !cr.shadow {
			kinds := []string{cr.key}
			for j := range l.shadows {
				sr := &l.shadows[j]
				if !mayOverlap(cr, sr) {
					continue
				}
				e.ShadowsWith = append(e.ShadowsWith, sr.name)
				if !slices.Contains(kinds, sr.key) {
					kinds = append(kinds, sr.key)
				}
			}
			e.ClusterCalls = len(kinds)
		}
		first := ""
		for _, lim := range r.Limits {
			var le LimitExplanation
			switch k, _ := lim.kind(); k {
			case LimitDaily:
				le = LimitExplanation{Kind: k, Spec: fmt.Sprintf("%d per local day", lim.Daily),
					PerSecond: float64(lim.Daily) / 86400, Burst: lim.Daily,
					Denies: fmt.Sprintf("task %d of a local day (%s); resets at local midnight", lim.Daily+1, l.cfg.Timezone)}
			case LimitMinInterval:
				le = LimitExplanation{Kind: k, Spec: lim.MinInterval.String(),
					PerSecond: 1 / lim.MinInterval.Seconds(), Burst: 1,
					Denies: fmt.Sprintf("a task less than %s after the last allowed one", lim.MinInterval)}
			case LimitWindow:
				w := lim.Window
				le = LimitExplanation{Kind: k, Spec: fmt.Sprintf("%d per %s (sliding)", w.Count, w.Per),
					PerSecond: float64(w.Count) / w.Per.Seconds(), Burst: w.Count,
					Denies: fmt.Sprintf("task %d within any %s", w.Count+1, w.Per)}
			case LimitConcurrency:
				onExceed := cr.onExceed
				if cr.deferConc {
					onExceed = OnExceedDefer
				}
				le = LimitExplanation{Kind: k, Spec: fmt.Sprintf("%d at once (fleet-wide)", lim.Concurrency.Max),
					PerSecond: math.Inf(1), Burst: lim.Concurrency.Max,
					Denies: fmt.Sprintf("a task while %d runs for the same %s hold a slot (held until the run ends, or its lease lapses); "+
						"retry after the earliest holder's lease, at least 1s; on exceed: %s", lim.Concurrency.Max, cr.key, onExceed)}
				if p := lim.Concurrency.MaxPercent; p > 0 {
					scope := "the fleet's"
					switch cr.concPer {
					case PerASG:
						scope = "this agent's Auto Scaling group's"
					case PerAZ:
						scope = "this agent's availability zone's"
					}
					le = LimitExplanation{Kind: k, Spec: fmt.Sprintf("%s%% of %s agents in service at once", ftoa(p), scope),
						PerSecond: math.Inf(1), Burst: 1,
						Denies: fmt.Sprintf("a task while max(1, floor(%s%% of %s agents in service)) runs for the same %s hold a slot "+
							"(agents whose heartbeat lapsed do not count; reason concurrency_percent; on a Redis Cluster one ZCOUNT per decision more); "+
							"retry after the earliest holder's lease, at least 1s; on exceed: %s", ftoa(p), scope, cr.key, onExceed)}
				}
			case LimitRate:
				rt := lim.Rate
				b := max(rt.Burst, 1)
				le = LimitExplanation{Kind: k, Spec: fmt.Sprintf("%d per %s, burst x%d", rt.Count, rt.Per, b),
					PerSecond: float64(rt.Count) / rt.Per.Seconds(), Burst: rt.Count * b,
					Denies: fmt.Sprintf("task %d at once, or sustained above %s/s", rt.Count*b+1, ftoa(float64(rt.Count)/rt.Per.Seconds()))}
			}
			e.Limits = append(e.Limits, le)
			e.PerSecond = math.Min(e.PerSecond, le.PerSecond)
			if e.Burst < 0 || le.Burst < e.Burst {
				e.Burst, first = le.Burst, le.Kind
			}
		}
		e.DenialsStart = denialsStart(e.Burst, cr.key, first, r.Breaker)
		out = append(out, e)
	}
	return out
}

// denialsStart says when a rule first denies: the task past its lowest
// burst ceiling (burst < 0: none, by the limit kind first) and, with a
// breaker, once the breaker opens, which a key whose runs fail reaches
// sooner; a rule with neither never denies.
func denialsStart(burst int, key, first string, b *Breaker) string {
	var opens string
	if b != nil {
		opens = fmt.Sprintf("after %d failed or timed_out runs within %s", b.Failures, b.Window)
	}
	switch {
	case burst >= 0 && b != nil:
		return fmt.Sprintf("task %d in a burst for one %s (by %s); sooner for a %s whose runs fail: once the breaker opens %s",
			burst+1, key, first, key, opens)
	case burst >= 0:
		return fmt.Sprintf("task %d in a burst for one %s (by %s)", burst+1, key, first)
	case b != nil:
		return fmt.Sprintf("when the breaker opens, %s for one %s (no limit on how many run)", opens, key)
	default:
		return "never (no limits)"
	}
}

// String renders the explanation as a few indented lines.
func (e RuleExplanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %s: match %s, counted per %s\n", e.Rule, e.Match, e.Key)
	for _, le := range e.Limits {
		fmt.Fprintf(&b, "  %-12s %-28s %s/s sustained, %d at once; denies %s\n",
			le.Kind, le.Spec, ftoa(le.PerSecond), le.Burst, le.Denies)
	}
	if len(e.Limits) > 0 {
		fmt.Fprintf(&b, "  effective:   %s/s (%s/h), burst ceiling %d\n", ftoa(e.PerSecond), ftoa(e.PerSecond*3600), e.Burst)
	}
	fmt.Fprintf(&b, "  denials start: %s\n", e.DenialsStart)
	if e.Breaker != "" {
		fmt.Fprintf(&b, "  breaker: %s\n", e.Breaker)
	}
	if e.Shadow {
		fmt.Fprintf(&b, "  shadow: never denies; evaluated with the first matching enforced rule, state kept as if enforced, would-be denials logged and counted as decision=\"shadow_denied\"\n")
	} else if len(e.ShadowsWith) > 0 {
		calls := "1 EVALSHA per decision"
		if len(e.ShadowsWith) > 0 {
			calls += fmt.Sprintf(" with shadows [%s]", strings.Join(e.ShadowsWith, ", "))
		}
		if e.ClusterCalls > 1 {
			calls += fmt.Sprintf("; %d on a Redis Cluster (keys in %d hash slots)", e.ClusterCalls, e.ClusterCalls)
		}
		fmt.Fprintf(&b, "  round trips: %s\n", calls)
	}
	block := "none"
	if e.Block > 0 {
		block = e.Block.String() + " after any denial (sticky)"
	}
	fmt.Fprintf(&b, "  block: %s; on exceed: %s; fail: %s\n", block, e.OnExceed, e.Fail)
	fmt.Fprintf(&b, "  timezone: %s; next reset: %s\n", e.Timezone, e.NextReset.Format(time.RFC3339))
	return b.String()
}

// WriteExplain writes every explanation, then a note on unmatched tasks.
func WriteExplain(w io.Writer, rules []RuleExplanation) error {
	for _, e := range rules {
		if _, err := io.WriteString(w, e.String()); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "rule %s: tasks no rule matches are allowed (counted as rule=%q)\n", RuleNone, RuleNone)
	return err
}

func matchString(m Match) string {
	var parts []string
	if len(m.Diagnostic) > 0 {
		parts = append(parts, "diagnostic in ["+strings.Join(m.Diagnostic, ", ")+"]")
	}
	if m.Host != "" {
		parts = append(parts, "host =~ "+m.Host)
	}
	if len(m.Severity) > 0 {
		parts = append(parts, "severity in ["+strings.Join(m.Severity, ", ")+"]")
	}
	if len(m.Origin) > 0 {
		parts = append(parts, "origin in ["+strings.Join(m.Origin, ", ")+"]")
	}
	if len(parts) == 0 {
		return "every task"
	}
	return strings.Join(parts, " and ")
}

func ftoa(f float64) string {
	if math.IsInf(f, 1) {
		return "unlimited"
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", f), "0"), ".")
}

// compiled returns the compiled rule of configuration index idx-1.
func (l *Limiter) compiled(idx int) *compiledRule {
	for i := range l.rules {
		if l.rules[i].idx == idx {
			return &l.rules[i]
		}
	}
	for i := range l.shadows {
		if l.shadows[i].idx == idx {
			return &l.shadows[i]
		}
	}
	return nil
}

// mayOverlap reports whether a task could match both a and b: false only
// when their diagnostic or severity lists are both set and disjoint (host
// expressions are assumed to overlap).
func mayOverlap(a, b *compiledRule) bool {
	disjoint := func(x, y []string) bool {
		if len(x) == 0 || len(y) == 0 {
			return false
		}
		for _, v := range x {
			if slices.Contains(y, v) {
				return false
			}
		}
		return true
	}
	return !disjoint(a.diags, b.diags) && !disjoint(a.sevs, b.sevs)
}
