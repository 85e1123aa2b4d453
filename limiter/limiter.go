package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// RuleNone is the rule name of a decision no rule matched.
const RuleNone = "none"

var errNilBackend = errors.New("limiter: nil backend")

// Reasons, stable and machine-readable, as carried in Decision.Reason and the
// reason label of autodiag_limiter_decisions_total.
const (
	ReasonAllowed        = "allowed"
	ReasonNoRule         = "no_rule"
	ReasonDaily          = "daily_exceeded"
	ReasonMinInterval    = "min_interval"
	ReasonWindow         = "window_exceeded"
	ReasonRate           = "rate_exceeded"
	ReasonBlocked        = "blocked"
	ReasonDuplicate      = "duplicate"
	ReasonDegradedOpen   = "degraded_open"
	ReasonDegradedClosed = "degraded_closed"
	ReasonBreakerOpen    = "breaker_open"
	ReasonConcurrency    = "concurrency_exceeded"
	// ReasonConcurrencyPercent is a denial by a concurrency cap set as a
	// share of the agents in service (max_percent): Counters say how many
	// run, of how many allowed, of how many agents.
	ReasonConcurrencyPercent = "concurrency_percent"
	// ReasonFailing is a denial by the rule's failure breaker (runs it
	// allowed kept failing), not by the Redis-outage breaker (ReasonBreakerOpen).
	ReasonFailing = "failing"
)

// Outcomes of a run, as passed to Done: failed and timed_out count for the
// failure breaker of the rules that allowed the run; any other outcome
// (e.g. "released") only gives back what the run holds.
const (
	OutcomeSucceeded = outcome.Succeeded
	OutcomeFailed    = outcome.Failed
	OutcomeTimedOut  = outcome.TimedOut
)

// DefaultLease is how long a concurrency slot or breaker probe is held when
// Request.Lease is zero.
const DefaultLease = time.Minute

// Request is what the limiter decides on: one validated task.
type Request struct {
	Host       string // already normalised and allow-listed by the caller
	Diagnostic string
	Severity   string
	// Origin is the task's origin ("" or "investigation"), for
	// Match.Origin.
	Origin    string
	DedupeKey string // value of the dedupe field for this task; "" = no dedupe
	// TaskID identifies the run: it holds concurrency slots and the breaker
	// probe under this id, and Done and Renew find them by it. Empty: a slot
	// or probe taken cannot be given back or renewed and lapses with Lease.
	TaskID string
	// Lease is how long a slot or probe taken now is held unless Renew
	// extends it: the task's execution lease, so that an agent that dies
	// frees them when its lease ends. Zero means DefaultLease.
	Lease time.Duration
}

// Decision is the limiter's answer, with the data an operator or the agent
// needs to act on it.
type Decision struct {
	Allowed    bool
	Duplicate  bool          // dedupe hit: NOT a rate-limit denial, consumes nothing
	Rule       string        // matched rule name, RuleNone if no rule matched
	Limit      string        // the limit that denied: daily | min_interval | window | rate | block | ""
	Reason     string        // one of the Reason* constants
	OnExceed   string        // the matched rule's on_exceed ("drop" | "defer")
	RetryAfter time.Duration // when a retry could be allowed (0 when allowed)
	Degraded   bool          // the backend failed, timed out or the breaker is open; the fail mode decided
	Counters   Counters
	// Probe: the run is the one its rule's failure breaker lets through
	// after open_for; its outcome (Done) closes or reopens the breaker.
	Probe bool
	// Shadow holds the verdict of every matching shadow rule, in
	// configuration order; they never change Allowed.
	Shadow []ShadowResult
}

// ShadowResult is what a shadow rule would have decided.
type ShadowResult struct {
	Rule       string
	Allowed    bool // false: the rule would have denied the task (decision="shadow_denied")
	Limit      string
	Reason     string
	RetryAfter time.Duration
	Counters   Counters
}

// Counters are the state of the matched rule's limits after the decision.
// Limits the rule does not have are left zero.
type Counters struct {
	DailyUsed, DailyLimit       int
	SinceLast                   time.Duration // since the last allowed run; -1 if none within min_interval
	WindowCount, WindowLimit    int
	BucketLevel, BucketCapacity float64
	// Running is how many concurrency slots of the key are held (this
	// run's included when allowed), of ConcurrencyLimit.
	Running, ConcurrencyLimit int
	// AgentsInService and MaxPercent, for a max_percent cap: the agents
	// in service counted in its scope, and the share; ConcurrencyLimit is
	// then max(1, floor(MaxPercent × AgentsInService / 100)).
	AgentsInService int
	MaxPercent      float64
}

// Options are the limiter's dependencies; every zero value has a default.
type Options struct {
	Clock      clock.Clock           // nil = wall clock
	Registerer prometheus.Registerer // nil = metrics not registered
	Logger     *slog.Logger          // nil = discard
	Timeout    time.Duration         // bound for each backend call (redis.timeout); 0 = 200ms
	// BreakerThreshold is the number of consecutive backend failures that
	// opens the circuit breaker; 0 = 5.
	BreakerThreshold int
	// BreakerCooldown is how long (on Clock) the open breaker decides without
	// calling the backend before it lets one probe through; 0 = 5s.
	BreakerCooldown time.Duration
	// ASG and AZ place the deciding agent, for max_percent caps per asg or
	// per az: its runs count, and its share is of the agents in service,
	// under that group or zone. Empty: unknown, counted under "".
	ASG, AZ string
}

// Limiter decides whether tasks may run. It is safe for concurrent use.
type Limiter struct {
	cfg     Config
	backend Backend
	clock   clock.Clock
	log     *slog.Logger
	timeout time.Duration
	days    calendar
	rules   []compiledRule // enforced rules, first-match
	shadows []compiledRule // shadow rules, every match
	none    compiledRule   // the pseudo rule of unmatched requests (dedupe only)
	dedupe  int64          // dedupe TTL in µs; 0 = dedupe off
	metrics *metrics
	breaker breaker
	seq     atomic.Uint64 // window ZSET members
	salt    uint64
	asg, az string
}

// compiledRule is a Rule ready to evaluate.
type compiledRule struct {
	idx      int
	name     string
	diags    []string
	host     *regexp.Regexp
	sevs     []string
	origins  []string
	key      string
	fail     string
	onExceed string
	order    string // limit codes in configuration order: d m w r
	daily    int
	minIvl   int64 // µs
	winCount int
	winPer   int64 // µs
	rateT    int64 // µs between two tasks at the sustained rate (ceil)
	rateCap  int   // bucket capacity, Count*Burst
	block    int64 // µs
	conc     int   // concurrency slots
	concPct  int64 // max_percent in hundredths of a percent (conc is then computed)
	concPer  string
	brkFail  int   // failure breaker: failures within brkWin open it for brkOpen
	brkWin   int64 // µs
	brkOpen  int64 // µs
	shadow   bool
	// deferConc: a concurrency denial defers (on_exceed left empty).
	deferConc bool
}

// New validates cfg and returns a limiter deciding with backend b.
func New(cfg Config, b Backend, opts Options) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("limiter: invalid config: %w", err)
	}
	if b == nil {
		return nil, errNilBackend
	}
	if cfg.Timezone == "" {
		cfg.Timezone = "UTC"
	}
	if cfg.Fail == "" {
		cfg.Fail = FailOpen
	}
	loc, err := time.LoadLocation(cfg.Timezone)
	if err != nil {
		return nil, fmt.Errorf("limiter: timezone: %w", err)
	}
	l := &Limiter{
		cfg:     cfg,
		backend: b,
		clock:   opts.Clock,
		log:     opts.Logger,
		timeout: opts.Timeout,
		days:    calendar{loc: loc},
		salt:    uint64(time.Now().UnixNano()),
		asg:     opts.ASG,
		az:      opts.AZ,
	}
	if l.clock == nil {
		l.clock = clock.Wall{}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.timeout <= 0 {
		l.timeout = 200 * time.Millisecond
	}
	l.breaker.threshold = opts.BreakerThreshold
	if l.breaker.threshold <= 0 {
		l.breaker.threshold = 5
	}
	l.breaker.cooldown = opts.BreakerCooldown
	if l.breaker.cooldown <= 0 {
		l.breaker.cooldown = 5 * time.Second
	}
	if cfg.Dedupe.Key != "" {
		ttl := cfg.Dedupe.TTL
		if ttl == 0 {
			ttl = DefaultDedupeTTL
		}
		l.dedupe = ttl.Microseconds()
	}
	names := []string{RuleNone}
	for i, r := range cfg.Rules {
		cr := compiledRule{
			idx: i + 1, name: r.Name, diags: r.Match.Diagnostic, sevs: r.Match.Severity, origins: r.Match.Origin,
			key: r.Key, fail: r.Fail, onExceed: r.OnExceed, block: r.Block.Microseconds(),
		}
		if cr.key == "" {
			cr.key = KeyHost
		}
		if cr.fail == "" {
			cr.fail = cfg.Fail
		}
		if cr.onExceed == "" {
			cr.onExceed = OnExceedDrop
			cr.deferConc = true
		}
		if b := r.Breaker; b != nil {
			cr.brkFail, cr.brkWin, cr.brkOpen = b.Failures, b.Window.Microseconds(), b.OpenFor.Microseconds()
		}
		cr.shadow = r.Shadow
		if r.Match.Host != "" {
			cr.host = regexp.MustCompile(r.Match.Host) // validated above
		}
		for _, lim := range r.Limits {
			switch k, _ := lim.kind(); k {
			case LimitDaily:
				cr.daily, cr.order = lim.Daily, cr.order+"d"
			case LimitMinInterval:
				cr.minIvl, cr.order = lim.MinInterval.Microseconds(), cr.order+"m"
			case LimitWindow:
				cr.winCount, cr.winPer, cr.order = lim.Window.Count, lim.Window.Per.Microseconds(), cr.order+"w"
			case LimitRate:
				burst := max(lim.Rate.Burst, 1)
				per := lim.Rate.Per.Microseconds()
				cr.rateT = (per + int64(lim.Rate.Count) - 1) / int64(lim.Rate.Count)
				cr.rateCap = lim.Rate.Count * burst
				cr.order += "r"
			case LimitConcurrency:
				cr.conc, cr.order = lim.Concurrency.Max, cr.order+"c"
				if p := lim.Concurrency.MaxPercent; p > 0 {
					cr.conc, cr.concPct, cr.concPer = 1, int64(math.Round(p*100)), lim.Concurrency.Per
					if cr.concPer == "" {
						cr.concPer = PerFleet
					}
				}
			}
		}
		if cr.shadow {
			l.shadows = append(l.shadows, cr)
		} else {
			l.rules = append(l.rules, cr)
		}
		names = append(names, r.Name)
	}
	l.none = compiledRule{idx: 0, name: RuleNone, key: KeyHost, fail: cfg.Fail, onExceed: OnExceedDrop}
	m, err := newMetrics(opts.Registerer, names)
	if err != nil {
		return nil, err
	}
	l.metrics = m
	return l, nil
}

// match returns the first enforced rule matching r, or nil.
func (l *Limiter) match(r *Request) *compiledRule {
	for i := range l.rules {
		if cr := &l.rules[i]; cr.matches(r) {
			return cr
		}
	}
	return nil
}

// matchShadows appends every shadow rule matching r to dst.
func (l *Limiter) matchShadows(dst []*compiledRule, r *Request) []*compiledRule {
	for i := range l.shadows {
		if cr := &l.shadows[i]; cr.matches(r) {
			dst = append(dst, cr)
		}
	}
	return dst
}

func (cr *compiledRule) matches(r *Request) bool {
	return (len(cr.diags) == 0 || slices.Contains(cr.diags, r.Diagnostic)) &&
		(len(cr.sevs) == 0 || slices.Contains(cr.sevs, r.Severity)) &&
		(len(cr.origins) == 0 || slices.Contains(cr.origins, r.Origin)) &&
		(cr.host == nil || cr.host.MatchString(r.Host))
}

// holds reports whether a run allowed by cr holds something until it ends.
func (cr *compiledRule) holds() bool { return cr.conc > 0 || cr.brkFail > 0 }

// Allow decides whether r may run now and, when every limit of the matched
// rule allows it, consumes quota. On a backend error or timeout (or while the
// circuit breaker is open) it returns the rule's fail-mode decision with
// Degraded set and a nil error; the cause is logged and counted in
// autodiag_limiter_degraded_total. The error is non-nil only when ctx is done.
func (l *Limiter) Allow(ctx context.Context, r Request) (Decision, error) {
	return l.decide(ctx, &r, false)
}

// Check is a dry run of Allow: the same evaluation, but it consumes nothing,
// sets no block and no dedupe mark, bypasses the circuit breaker, records no
// metrics, and returns a backend error instead of degrading.
func (l *Limiter) Check(ctx context.Context, r Request) (Decision, error) {
	return l.decide(ctx, &r, true)
}

func (l *Limiter) decide(ctx context.Context, r *Request, dry bool) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	cr := l.match(r)
	matched := cr != nil
	var shadowBuf [4]*compiledRule
	shadows := l.matchShadows(shadowBuf[:0], r)
	dedupe := r.DedupeKey != "" && l.dedupe > 0
	if !matched {
		cr = &l.none
	}
	if cr.order == "" && cr.brkFail == 0 && !dedupe && len(shadows) == 0 {
		// No limits (so no denials to block on) and nothing to count: nothing
		// to ask the backend.
		d := Decision{Allowed: true, Rule: cr.name, Reason: ReasonAllowed, OnExceed: cr.onExceed,
			Counters: Counters{SinceLast: -1}}
		if !matched {
			d.Reason = ReasonNoRule
		}
		if !dry {
			l.metrics.observe(cr.idx, &d)
		}
		return d, nil
	}
	now := l.clock.Now()
	var o op
	l.opFor(&o, r, cr, shadows, dedupe, dry, now)

	var res result
	var err error
	if dry {
		res, err = l.backend.eval(ctx, &o, l.timeout)
		if err != nil {
			if cerr := ended(ctx); cerr != nil {
				return Decision{}, cerr
			}
			return Decision{}, fmt.Errorf("limiter: check %s: %w", o.rules[0].tag, err)
		}
	} else {
		if !l.breaker.allow(now) {
			d := cr.degraded(ReasonBreakerOpen, l.breaker.cooldown)
			l.metrics.observe(cr.idx, &d)
			l.metrics.degraded.Inc()
			logDecision(ctx, l.log, r, &d, nil, l.breaker.state())
			return d, nil
		}
		res, err = l.backend.eval(ctx, &o, l.timeout)
		if err != nil {
			if cerr := ended(ctx); cerr != nil {
				// The caller's end (its deadline may have passed unseen
				// while this process was stopped): not a Redis outage.
				l.breaker.abort()
				return Decision{}, cerr
			}
			l.breaker.failure(l.clock.Now())
			reason := ReasonDegradedOpen
			if cr.fail == FailClosed {
				reason = ReasonDegradedClosed
			}
			d := cr.degraded(reason, l.breaker.cooldown)
			l.metrics.observe(cr.idx, &d)
			l.metrics.degraded.Inc()
			logDecision(ctx, l.log, r, &d, err, l.breaker.state())
			return d, nil
		}
		l.breaker.success()
	}
	return l.settle(ctx, r, cr, matched, shadows, &o, &res, dry)
}

// opFor fills o with the decision of r by rule cr and shadows at now.
func (l *Limiter) opFor(o *op, r *Request, cr *compiledRule, shadows []*compiledRule, dedupe, dry bool, now time.Time) {
	*o = op{dry: dry, now: now.UnixMicro(), host: r.Host, diag: r.Diagnostic, enforced: true,
		member: l.salt ^ l.seq.Add(1)*0x9E3779B97F4A7C15}
	if dedupe {
		o.dedupeID, o.dedupeTTL = r.DedupeKey, l.dedupe
	}
	o.rules = o.ruleBuf[:0]
	o.rules = append(o.rules, ruleOp{})
	l.ruleOpFor(&o.rules[0], cr, r, now)
	holds := cr.holds()
	for _, sr := range shadows {
		o.rules = append(o.rules, ruleOp{})
		l.ruleOpFor(&o.rules[len(o.rules)-1], sr, r, now)
		holds = holds || sr.holds()
	}
	if holds {
		o.task = r.TaskID
		if o.task == "" {
			o.task = "anon-" + strconv.FormatUint(o.member, 16)
		}
		lease := r.Lease
		if lease <= 0 {
			lease = DefaultLease
		}
		o.leaseUntil = o.now + lease.Microseconds()
	}
}

// settle turns the backend's answer res to o into the Decision of r,
// recording it (metrics, logs) unless dry.
func (l *Limiter) settle(ctx context.Context, r *Request, cr *compiledRule, matched bool, shadows []*compiledRule, o *op, res *result, dry bool) (Decision, error) {
	if len(res.rules) == 0 {
		return Decision{}, fmt.Errorf("limiter: decide %s: %w: no rule in the reply", o.rules[0].tag, ErrBadReply)
	}
	d := cr.decision(matched, &res.rules[0])
	if res.rules[0].status != statusDuplicate && len(shadows) > 0 {
		if len(res.rules) != len(o.rules) {
			return Decision{}, fmt.Errorf("limiter: decide %s: %w: %d rules, want %d", o.rules[0].tag, ErrBadReply, len(res.rules), len(o.rules))
		}
		d.Shadow = make([]ShadowResult, len(shadows))
		for i, sr := range shadows {
			sd := sr.decision(true, &res.rules[i+1])
			d.Shadow[i] = ShadowResult{Rule: sd.Rule, Allowed: sd.Allowed, Limit: sd.Limit, Reason: sd.Reason,
				RetryAfter: sd.RetryAfter, Counters: sd.Counters}
		}
	}
	if !dry {
		l.metrics.observe(cr.idx, &d)
		if !d.Allowed && !d.Duplicate {
			logDecision(ctx, l.log, r, &d, nil, l.breaker.state())
		}
		for i := range d.Shadow {
			if sd := &d.Shadow[i]; !sd.Allowed {
				l.metrics.observeShadow(shadows[i].idx, sd.Reason)
				logShadow(ctx, l.log, r, sd)
			}
		}
	}
	return d, nil
}

// logShadow logs a shadow rule's would-be denial.
func logShadow(ctx context.Context, log *slog.Logger, r *Request, sd *ShadowResult) {
	if !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	log.LogAttrs(ctx, slog.LevelInfo, "limiter shadow rule would deny task",
		slog.String("host", r.Host),
		slog.String("diagnostic", r.Diagnostic),
		slog.String("task_id", r.TaskID),
		slog.String("rule", sd.Rule),
		slog.String("limit", sd.Limit),
		slog.String("reason", sd.Reason),
		slog.Float64("retry_after", sd.RetryAfter.Seconds()),
	)
}

// degraded is the fail-mode decision of rule cr; a denial is retried
// after the Redis-outage breaker's cooldown.
func (cr *compiledRule) degraded(reason string, cooldown time.Duration) Decision {
	d := Decision{
		Allowed: cr.fail != FailClosed, Rule: cr.name, Reason: reason, OnExceed: cr.onExceed,
		Degraded: true, Counters: Counters{SinceLast: -1},
	}
	if !d.Allowed {
		d.RetryAfter = cooldown
	}
	return d
}

// decision turns a backend result of rule cr into a Decision.
func (cr *compiledRule) decision(matched bool, res *ruleResult) Decision {
	d := Decision{Rule: cr.name, OnExceed: cr.onExceed}
	c := &d.Counters
	c.SinceLast = -1
	if cr.daily > 0 {
		c.DailyUsed, c.DailyLimit = int(res.dailyUsed), cr.daily
	}
	if cr.minIvl > 0 && res.since >= 0 {
		c.SinceLast = time.Duration(res.since) * time.Microsecond
	}
	if cr.winCount > 0 {
		c.WindowCount, c.WindowLimit = int(res.winCount), cr.winCount
	}
	if cr.rateT > 0 {
		c.BucketLevel = float64(res.level) / float64(cr.rateT)
		c.BucketCapacity = float64(cr.rateCap)
	}
	if cr.conc > 0 {
		c.Running, c.ConcurrencyLimit = int(res.holders), cr.conc
	}
	if cr.concPct > 0 {
		c.ConcurrencyLimit, c.AgentsInService, c.MaxPercent = int(res.concLimit), int(res.agents), float64(cr.concPct)/100
	}
	d.Probe = res.probe
	switch {
	case res.status == statusDuplicate:
		d.Duplicate, d.Reason = true, ReasonDuplicate
	case res.status == statusAllowed && !matched:
		d.Allowed, d.Reason = true, ReasonNoRule
	case res.status == statusAllowed:
		d.Allowed, d.Reason = true, ReasonAllowed
	default:
		d.RetryAfter = time.Duration(res.retry) * time.Microsecond
		switch res.limit {
		case 'b':
			d.Limit, d.Reason = LimitBlock, ReasonBlocked
		case 'd':
			d.Limit, d.Reason = LimitDaily, ReasonDaily
		case 'm':
			d.Limit, d.Reason = LimitMinInterval, ReasonMinInterval
		case 'w':
			d.Limit, d.Reason = LimitWindow, ReasonWindow
		case 'r':
			d.Limit, d.Reason = LimitRate, ReasonRate
		case 'c':
			d.Limit, d.Reason = LimitConcurrency, ReasonConcurrency
			if cr.concPct > 0 {
				d.Reason = ReasonConcurrencyPercent
			}
			if cr.deferConc {
				d.OnExceed = OnExceedDefer
			}
		case 'f':
			d.Limit, d.Reason = LimitBreaker, ReasonFailing
		}
	}
	return d
}

// logDecision logs a denial or a degraded decision; redis is the state
// of the Redis-outage breaker.
func logDecision(ctx context.Context, log *slog.Logger, r *Request, d *Decision, err error, redis string) {
	level := slog.LevelInfo
	if d.Degraded {
		level = slog.LevelWarn
	}
	if !log.Enabled(ctx, level) {
		return
	}
	msg := "limiter denied task"
	switch {
	case d.Degraded && d.Allowed:
		msg = "limiter degraded, failing open"
	case d.Degraded:
		msg = "limiter degraded, failing closed"
	}
	sinceLast := d.Counters.SinceLast.Seconds()
	if d.Counters.SinceLast < 0 {
		sinceLast = -1 // none within min_interval
	}
	// Durations are seconds as numbers, like every duration the agent logs.
	attrs := []slog.Attr{
		slog.String("host", r.Host),
		slog.String("diagnostic", r.Diagnostic),
		slog.String("rule", d.Rule),
		slog.String("limit", d.Limit),
		slog.String("reason", d.Reason),
		slog.Bool("allowed", d.Allowed),
		slog.Float64("retry_after", d.RetryAfter.Seconds()),
		slog.Bool("degraded", d.Degraded),
		slog.String("redis", redis),
		slog.Group("counters",
			slog.Int("daily_used", d.Counters.DailyUsed),
			slog.Int("daily_limit", d.Counters.DailyLimit),
			slog.Float64("since_last", sinceLast),
			slog.Int("window_count", d.Counters.WindowCount),
			slog.Int("window_limit", d.Counters.WindowLimit),
			slog.Float64("bucket_level", d.Counters.BucketLevel),
			slog.Float64("bucket_capacity", d.Counters.BucketCapacity),
			slog.Int("running", d.Counters.Running),
			slog.Int("concurrency_limit", d.Counters.ConcurrencyLimit),
			slog.Int("agents_in_service", d.Counters.AgentsInService),
			slog.Float64("max_percent", d.Counters.MaxPercent),
		),
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	log.LogAttrs(ctx, level, msg, attrs...)
}
