package limiter

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/configerr"
)

// Fail modes: what a rule decides when the backend cannot answer.
const (
	FailOpen   = "open"   // allow the task, mark the decision degraded
	FailClosed = "closed" // deny the task, mark the decision degraded
)

// Key kinds: which request value a rule's counters are kept for.
const (
	KeyHost           = "host"
	KeyDiagnostic     = "diagnostic"
	KeyHostDiagnostic = "host+diagnostic"
	KeyGlobal         = "global"
)

// On-exceed actions, carried in the Decision for the agent to act on.
const (
	OnExceedDrop  = "drop"  // end the task as rate_limited
	OnExceedDefer = "defer" // requeue the task after RetryAfter
)

// Config is the `limiter:` section of the autodiag configuration, less the
// host allow-list (limiter.hosts), which is task validation's and which the
// agent inlines beside it.
//
// The zero value is usable after Defaults is applied: see DefaultConfig for
// the value of every field when it is left out.
type Config struct {
	// Timezone is the IANA zone whose calendar day bounds `daily` quotas.
	// Empty means "UTC".
	Timezone string `yaml:"timezone"`
	// Fail is the default fail mode of every rule: "open" (empty) or "closed".
	Fail string `yaml:"fail"`
	// Dedupe makes the same alert event within TTL a duplicate.
	Dedupe DedupeConfig `yaml:"dedupe"`
	// Rules are evaluated first-match in order. No rules: everything allowed.
	Rules []Rule `yaml:"rules"`
}

// DedupeConfig names the task field that identifies an alert event and how
// long a repeat of it counts as a duplicate.
type DedupeConfig struct {
	// Key is the task field holding the event identity, e.g. "alert.event_id";
	// the agent extracts its value into Request.DedupeKey. Empty disables dedupe.
	Key string `yaml:"key"`
	// TTL is how long an allowed event is remembered. Zero means 10m when Key is set.
	TTL time.Duration `yaml:"ttl"`
}

// Rule is one policy: which tasks it matches, what it counts them by, and
// the limits that apply to them.
type Rule struct {
	// Name identifies the rule in decisions, metrics and Redis keys. Required, unique.
	Name string `yaml:"name"`
	// Match selects tasks; an empty Match matches every task.
	Match Match `yaml:"match"`
	// Key is what the counters are kept for: host (empty), diagnostic,
	// host+diagnostic or global.
	Key string `yaml:"key"`
	// Limits all have to allow for a task to be allowed; at most one of each kind.
	Limits []Limit `yaml:"limits"`
	// Block keeps the key denied for this long after any denial of the rule
	// (sticky). Zero: no block.
	Block time.Duration `yaml:"block"`
	// OnExceed is "drop" (empty) or "defer"; the agent acts on it.
	OnExceed string `yaml:"on_exceed"`
	// Fail overrides Config.Fail for this rule; empty inherits it.
	Fail string `yaml:"fail"`
	// Breaker denies the key (reason "failing") for OpenFor once Failures
	// runs it allowed ended failed or timed_out within Window, then lets one
	// probe through. Nil: no breaker.
	Breaker *Breaker `yaml:"breaker"`
	// Shadow rules never deny: every matching one is evaluated besides the
	// first matching enforced rule (first-match applies among enforced rules
	// only), with its state kept as if enforced, and a would-be denial is
	// logged and counted (decision="shadow_denied").
	Shadow bool `yaml:"shadow"`
}

// Breaker is a rule's failure breaker.
type Breaker struct {
	Failures int           `yaml:"failures"`
	Window   time.Duration `yaml:"window"`
	OpenFor  time.Duration `yaml:"open_for"`
}

// Match selects the tasks a rule applies to. Every non-empty field has to match.
type Match struct {
	Diagnostic []string `yaml:"diagnostic"` // any of; empty = any
	Host       string   `yaml:"host"`       // regexp; empty = any
	Severity   []string `yaml:"severity"`   // any of; empty = any
	// Origin is any of the tasks' origins: "investigation" for the tool
	// calls of a root-cause investigation; empty = any.
	Origin []string `yaml:"origin"`
}

// Limit is one item of a rule's limits list; exactly one field is set.
type Limit struct {
	// Daily is the number of allowed tasks per calendar day of Config.Timezone.
	Daily int `yaml:"daily"`
	// MinInterval is the least time between two allowed tasks for the key.
	MinInterval time.Duration `yaml:"min_interval"`
	// Window is a sliding window: at most Count allowed tasks in any Per.
	Window *Window `yaml:"window"`
	// Rate is a leaky bucket (GCRA): Count per Per sustained, Count*Burst at once.
	Rate *Rate `yaml:"rate"`
	// Concurrency is how many allowed tasks of the key may run at once,
	// fleet-wide (`concurrency: N`), or a share of the agents in service
	// (`concurrency: {max_percent: P, per: fleet|asg|az}`); a slot is held
	// under the task's lease until its run ends.
	Concurrency Concurrency `yaml:"concurrency"`
}

// Concurrency scopes, Concurrency.Per: whose agents in service a
// max_percent cap is a share of, and whose runs it counts.
const (
	PerFleet = "fleet" // every agent sharing the Redis (empty Per)
	PerASG   = "asg"   // the deciding agent's Auto Scaling group
	PerAZ    = "az"    // the deciding agent's availability zone
)

// Concurrency is a concurrency limit: Max runs at once, or MaxPercent of
// the agents in service (state running, heartbeat fresh in the instance
// registry) of the fleet, or of the deciding agent's Auto Scaling group or
// availability zone (Per), rounded down and never below 1.
type Concurrency struct {
	Max        int
	MaxPercent float64
	Per        string
}

// IsZero reports an unset concurrency limit.
func (c Concurrency) IsZero() bool { return c.Max == 0 && c.MaxPercent == 0 && c.Per == "" }

// UnmarshalYAML reads `concurrency: N` or `concurrency: {max_percent: P,
// per: S}`; any other key of the mapping is an error.
func (c *Concurrency) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v int
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("a number of runs, or {max_percent: P, per: fleet|asg|az}: %w", err)
		}
		*c = Concurrency{Max: v}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return errors.New("want a number of runs, or {max_percent: P, per: fleet|asg|az}")
	}
	var out Concurrency
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "max_percent":
			err = v.Decode(&out.MaxPercent)
		case "per":
			err = v.Decode(&out.Per)
		default:
			err = fmt.Errorf("unknown key %q (max_percent, per)", k.Value)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k.Value, err)
		}
	}
	if out.MaxPercent == 0 && out.Per == "" {
		return errors.New("max_percent must be set")
	}
	*c = out
	return nil
}

// MarshalYAML writes the form UnmarshalYAML reads: a number, or the
// max_percent mapping.
func (c Concurrency) MarshalYAML() (any, error) {
	if c.MaxPercent == 0 && c.Per == "" {
		return c.Max, nil
	}
	return struct {
		MaxPercent float64 `yaml:"max_percent"`
		Per        string  `yaml:"per,omitempty"`
	}{c.MaxPercent, c.Per}, nil
}

// InServiceKey is the sorted set of the agents in service of a
// concurrency scope (per: fleet, asg, az, with the group or zone as value),
// members scored by their heartbeat expiry (Unix ms): the agent's
// instance registry writes it, a max_percent limit counts it.
func InServiceKey(prefix, per, value string) string {
	switch per {
	case PerASG, PerAZ:
		return prefix + "inservice:" + per + ":" + value
	}
	return prefix + "inservice"
}

// UsesPercent reports whether a rule caps concurrency as a share of the
// agents in service, and the scopes they use, so the agent keeps the
// in-service index those rules count.
func (c Config) UsesPercent() (scopes []string) {
	for _, r := range c.Rules {
		for _, l := range r.Limits {
			if l.Concurrency.MaxPercent > 0 {
				per := l.Concurrency.Per
				if per == "" {
					per = PerFleet
				}
				if !slices.Contains(scopes, per) {
					scopes = append(scopes, per)
				}
			}
		}
	}
	return scopes
}

// Window is a sliding-window limit.
type Window struct {
	Count int           `yaml:"count"`
	Per   time.Duration `yaml:"per"`
}

// Rate is a leaky-bucket limit. Burst is a multiplier (zero means 1): the
// bucket holds Count*Burst tasks.
type Rate struct {
	Count int           `yaml:"count"`
	Per   time.Duration `yaml:"per"`
	Burst int           `yaml:"burst"`
}

// Limit kind names, as reported in Decision.Limit.
const (
	LimitDaily       = "daily"
	LimitMinInterval = "min_interval"
	LimitWindow      = "window"
	LimitRate        = "rate"
	LimitBlock       = "block"
	LimitConcurrency = "concurrency"
	LimitBreaker     = "breaker"
)

// DefaultDedupeTTL is the dedupe TTL when Dedupe.Key is set and TTL is zero.
const DefaultDedupeTTL = 10 * time.Minute

// DefaultConfig returns the limiter section used when the configuration
// file leaves it out:
//
//	timezone: UTC
//	fail: open
//	dedupe: {key: alert.event_id, ttl: 10m}
//	rules: []                              # no rule: every task allowed (rule "none")
func DefaultConfig() Config {
	return Config{
		Timezone: "UTC",
		Fail:     FailOpen,
		Dedupe:   DedupeConfig{Key: "alert.event_id", TTL: DefaultDedupeTTL},
	}
}

// kind returns the kind of a limit item and how many fields it sets.
func (l Limit) kind() (string, int) {
	var k string
	n := 0
	if l.Daily != 0 {
		k, n = LimitDaily, n+1
	}
	if l.MinInterval != 0 {
		k, n = LimitMinInterval, n+1
	}
	if l.Window != nil {
		k, n = LimitWindow, n+1
	}
	if l.Rate != nil {
		k, n = LimitRate, n+1
	}
	if !l.Concurrency.IsZero() {
		k, n = LimitConcurrency, n+1
	}
	return k, n
}

// Validate reports every problem of the section at once, each a
// *configerr.Error whose key is relative to the limiter section.
func (c Config) Validate() error {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, configerr.Errorf(path, format, a...))
	}
	if c.Timezone != "" {
		if _, err := time.LoadLocation(c.Timezone); err != nil {
			add("timezone", "%w", err)
		}
	}
	if !validFail(c.Fail) {
		add("fail", "must be %q or %q, got %q", FailOpen, FailClosed, c.Fail)
	}
	if c.Dedupe.TTL < 0 || (c.Dedupe.TTL > 0 && c.Dedupe.TTL < time.Millisecond) {
		add("dedupe.ttl", "must be 0 (default 10m) or at least 1ms, got %s", c.Dedupe.TTL)
	}
	names := make(map[string]int, len(c.Rules))
	for i, r := range c.Rules {
		p := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			add(p+".name", "must be set")
		case r.Name == RuleNone:
			add(p+".name", "%q is reserved for tasks no rule matches", RuleNone)
		case !validName(r.Name):
			add(p+".name", "must match %s, got %q", nameRE, r.Name)
		default:
			if j, dup := names[r.Name]; dup {
				add(p+".name", "duplicate of rules[%d].name %q", j, r.Name)
			}
			names[r.Name] = i
		}
		if r.Match.Host != "" {
			if _, err := regexp.Compile(r.Match.Host); err != nil {
				add(p+".match.host", "invalid regexp: %w", err)
			}
		}
		switch r.Key {
		case "", KeyHost, KeyDiagnostic, KeyHostDiagnostic, KeyGlobal:
		default:
			add(p+".key", "must be one of host, diagnostic, host+diagnostic, global, got %q", r.Key)
		}
		switch r.OnExceed {
		case "", OnExceedDrop, OnExceedDefer:
		default:
			add(p+".on_exceed", "must be %q or %q, got %q", OnExceedDrop, OnExceedDefer, r.OnExceed)
		}
		if r.Fail != "" && !validFail(r.Fail) {
			add(p+".fail", "must be %q or %q, got %q", FailOpen, FailClosed, r.Fail)
		}
		if r.Block < 0 || (r.Block > 0 && r.Block < time.Millisecond) {
			add(p+".block", "must be 0 (none) or at least 1ms, got %s", r.Block)
		}
		seen := map[string]int{}
		for j, l := range r.Limits {
			lp := fmt.Sprintf("%s.limits[%d]", p, j)
			k, n := l.kind()
			if n != 1 {
				add(lp, "exactly one of daily, min_interval, window, rate, concurrency must be set, got %d", n)
				continue
			}
			if prev, dup := seen[k]; dup {
				add(lp, "a rule has at most one %s limit (also at limits[%d])", k, prev)
			}
			seen[k] = j
			switch k {
			case LimitDaily:
				if l.Daily < 0 {
					add(lp+".daily", "must be positive, got %d", l.Daily)
				}
			case LimitMinInterval:
				if l.MinInterval < time.Millisecond {
					add(lp+".min_interval", "must be at least 1ms, got %s", l.MinInterval)
				}
			case LimitWindow:
				if l.Window.Count <= 0 {
					add(lp+".window.count", "must be positive, got %d", l.Window.Count)
				}
				if l.Window.Per <= 0 {
					add(lp+".window.per", "must be positive, got %s", l.Window.Per)
				} else if l.Window.Per < time.Millisecond {
					add(lp+".window.per", "must be at least 1ms, got %s", l.Window.Per)
				}
			case LimitRate:
				if l.Rate.Count <= 0 {
					add(lp+".rate.count", "must be positive, got %d", l.Rate.Count)
				}
				if l.Rate.Per <= 0 {
					add(lp+".rate.per", "must be positive, got %s", l.Rate.Per)
				} else if l.Rate.Per < time.Millisecond {
					add(lp+".rate.per", "must be at least 1ms, got %s", l.Rate.Per)
				}
				if l.Rate.Burst < 0 {
					add(lp+".rate.burst", "must not be negative (0 means 1), got %d", l.Rate.Burst)
				}
			case LimitConcurrency:
				c := l.Concurrency
				switch {
				case c.MaxPercent == 0 && c.Max < 0:
					add(lp+".concurrency", "must be positive, got %d", c.Max)
				case c.MaxPercent != 0 && c.Max != 0:
					add(lp+".concurrency", "a number of runs or max_percent, not both")
				case c.MaxPercent != 0 && !(c.MaxPercent >= 0.01 && c.MaxPercent <= 100): // NaN fails too
					add(lp+".concurrency.max_percent", "must be within 0.01-100, got %g", c.MaxPercent)
				case c.MaxPercent == 0 && c.Per != "":
					add(lp+".concurrency.per", "applies to max_percent only")
				}
				switch c.Per {
				case "", PerFleet, PerASG, PerAZ:
				default:
					add(lp+".concurrency.per", "must be one of fleet, asg, az, got %q", c.Per)
				}
			}
		}
		if b := r.Breaker; b != nil {
			bp := p + ".breaker"
			if b.Failures <= 0 {
				add(bp+".failures", "must be positive, got %d", b.Failures)
			}
			if b.Window < time.Millisecond {
				add(bp+".window", "must be at least 1ms, got %s", b.Window)
			}
			if b.OpenFor < time.Millisecond {
				add(bp+".open_for", "must be at least 1ms, got %s", b.OpenFor)
			}
		}
	}
	return errors.Join(errs...)
}

// nameRE restricts rule names to what is safe inside a Redis key and a
// Prometheus label value.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func validName(s string) bool { return nameRE.MatchString(s) }

func validFail(s string) bool { return s == "" || s == FailOpen || s == FailClosed }
