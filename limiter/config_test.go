package limiter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/configerr"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	valid := func(mod func(c *Config)) Config {
		c := DefaultConfig()
		c.Rules = []Rule{{Name: "default", Limits: []Limit{{Daily: 2}, {MinInterval: 2 * time.Hour}}}}
		mod(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // each a prefix of one error message, in order
	}{
		{"default config", DefaultConfig(), nil},
		{"valid rules", valid(func(c *Config) {}), nil},
		{"unknown time zone", valid(func(c *Config) { c.Timezone = "Mars/X" }), []string{"timezone: unknown time zone Mars/X"}},
		{"bad fail mode", valid(func(c *Config) { c.Fail = "maybe" }), []string{`fail: must be "open" or "closed"`}},
		{"every rule problem at once", valid(func(c *Config) {
			c.Rules = append(c.Rules,
				Rule{Name: "default"},
				Rule{Name: "x", Match: Match{Host: "[a-"}, Key: "ip", OnExceed: "retry", Fail: "half", Block: -time.Second},
				Rule{Name: "none"},
				Rule{Name: "has space"},
				Rule{Name: "lims", Limits: []Limit{
					{},
					{Daily: 1, MinInterval: time.Second},
					{Window: &Window{Count: 0, Per: 0}},
					{Rate: &Rate{Count: -1, Per: time.Second, Burst: -2}},
					{Daily: -3},
					{Window: &Window{Count: 1, Per: time.Second}},
				}},
				Rule{Name: "tiny", Limits: []Limit{{MinInterval: time.Microsecond}, {Window: &Window{Count: 1, Per: time.Microsecond}}}},
			)
		}), []string{
			"rules[1].name: duplicate of rules[0].name",
			"rules[2].match.host: invalid regexp: ",
			"rules[2].key: must be one of",
			"rules[2].on_exceed: must be",
			"rules[2].fail: must be",
			"rules[2].block: must be 0 (none) or at least 1ms",
			`rules[3].name: "none" is reserved`,
			"rules[4].name: must match",
			"rules[5].limits[0]: exactly one of",
			"rules[5].limits[1]: exactly one of",
			"rules[5].limits[2].window.count: must be positive",
			"rules[5].limits[2].window.per: must be positive",
			"rules[5].limits[3].rate.count: must be positive",
			"rules[5].limits[3].rate.burst: must not be negative",
			"rules[5].limits[4].daily: must be positive",
			"rules[5].limits[5]: a rule has at most one window limit",
			"rules[6].limits[0].min_interval: must be at least 1ms",
			"rules[6].limits[1].window.per: must be at least 1ms",
		}},
		{"missing name", Config{Rules: []Rule{{}}}, []string{"rules[0].name: must be set"}},
		{"concurrency and breaker", valid(func(c *Config) {
			c.Rules = append(c.Rules,
				Rule{Name: "slots", Limits: []Limit{{Concurrency: Concurrency{Max: -1}}, {Concurrency: Concurrency{Max: 2}}, {Concurrency: Concurrency{Max: 1}, Daily: 1}}},
				Rule{Name: "brk", Shadow: true, Breaker: &Breaker{Failures: 0, Window: 0, OpenFor: time.Microsecond}},
			)
		}), []string{
			"rules[1].limits[0].concurrency: must be positive",
			"rules[1].limits[1]: a rule has at most one concurrency limit",
			"rules[1].limits[2]: exactly one of daily, min_interval, window, rate, concurrency must be set, got 2",
			"rules[2].breaker.failures: must be positive",
			"rules[2].breaker.window: must be at least 1ms",
			"rules[2].breaker.open_for: must be at least 1ms",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			var got []string
			if err != nil {
				var joined interface{ Unwrap() []error }
				if !errors.As(err, &joined) {
					t.Fatalf("Validate error is not an errors.Join: %v", err)
				}
				for _, e := range joined.Unwrap() {
					var ce *configerr.Error
					if !errors.As(e, &ce) || !strings.HasPrefix(e.Error(), ce.Key+": ") {
						t.Errorf("%q is not a *configerr.Error naming its key", e)
					}
					got = append(got, e.Error())
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("error %d = %q, want prefix %q", i, got[i], tc.want[i])
				}
			}
			if _, err := New(tc.cfg, NewMemory(), Options{}); (err == nil) != (len(tc.want) == 0) {
				t.Errorf("New error %v, want error: %v", err, len(tc.want) > 0)
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	const doc = `
timezone: America/Sao_Paulo
fail: open
dedupe: {key: alert.event_id, ttl: 10m}
rules:
  - name: heavy
    match: {diagnostic: [full-dump], host: '^db-', severity: [high, disaster]}
    key: host
    limits:
      - daily: 2
      - min_interval: 2h
      - window: {count: 10, per: 1m}
      - rate: {count: 15, per: 1s, burst: 3}
    block: 1h
    on_exceed: drop
    fail: closed
  - name: heavy-per-host
    match: {diagnostic: [full-dump]}
    key: host
    limits:
      - concurrency: 1
      - daily: 2
    on_exceed: defer
  - name: fleet-cap
    key: global
    limits: [{concurrency: 20}]
  - name: broken-diagnostic
    key: host+diagnostic
    breaker: {failures: 5, window: 10m, open_for: 30m}
  - name: try-tighter-quota
    shadow: true
    key: host
    limits: [{daily: 1}]
  - name: default
    limits: [{daily: 2}, {min_interval: 2h}]
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	h := c.Rules[0]
	if h.Block != time.Hour || h.Limits[1].MinInterval != 2*time.Hour || h.Limits[2].Window.Per != time.Minute ||
		h.Limits[3].Rate.Burst != 3 || c.Dedupe.TTL != 10*time.Minute || h.Fail != FailClosed {
		t.Fatalf("decoded %+v", c)
	}
	if c.Rules[1].Limits[0].Concurrency.Max != 1 || c.Rules[2].Limits[0].Concurrency.Max != 20 ||
		*c.Rules[3].Breaker != (Breaker{Failures: 5, Window: 10 * time.Minute, OpenFor: 30 * time.Minute}) || !c.Rules[4].Shadow {
		t.Fatalf("decoded %+v", c.Rules)
	}
}

func TestDayBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone       string
		at         time.Time
		start, end time.Time // UTC
	}{
		{"UTC", time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC),
			time.Date(2026, 8, 11, 0, 0, 0, 0, time.UTC), time.Date(2026, 8, 12, 0, 0, 0, 0, time.UTC)},
		{"America/New_York", time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC), // 23h day
			time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), time.Date(2026, 3, 9, 4, 0, 0, 0, time.UTC)},
		{"America/New_York", time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), // 25h day
			time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC)},
		{"America/Sao_Paulo", time.Date(2018, 11, 4, 12, 0, 0, 0, time.UTC), // midnight skipped: starts 01:00 -02
			time.Date(2018, 11, 4, 3, 0, 0, 0, time.UTC), time.Date(2018, 11, 5, 2, 0, 0, 0, time.UTC)},
		{"America/Sao_Paulo", time.Date(2018, 11, 3, 12, 0, 0, 0, time.UTC),
			time.Date(2018, 11, 3, 3, 0, 0, 0, time.UTC), time.Date(2018, 11, 4, 3, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.zone+" "+tc.at.Format(time.DateOnly), func(t *testing.T) {
			s, e := dayBounds(tc.at, mustLoc(t, tc.zone))
			if !s.Equal(tc.start) || !e.Equal(tc.end) {
				t.Fatalf("dayBounds = [%s, %s), want [%s, %s)", s.UTC(), e.UTC(), tc.start, tc.end)
			}
		})
	}
}

// TestConcurrencyPercentConfig: `concurrency` reads a number of runs or
// {max_percent, per}; an unknown key, both forms at once, a share out of
// range and an unknown scope are errors naming the key.
func TestConcurrencyPercentConfig(t *testing.T) {
	t.Parallel()
	decode := func(doc string) (Config, error) {
		var c Config
		dec := yaml.NewDecoder(strings.NewReader(doc))
		dec.KnownFields(true)
		err := dec.Decode(&c)
		return c, err
	}
	c, err := decode(`
rules:
  - {name: fleet, limits: [{concurrency: {max_percent: 10}}]}
  - {name: zone, limits: [{concurrency: {max_percent: 2.5, per: az}}]}
  - {name: runs, limits: [{concurrency: 3}]}
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := []Concurrency{c.Rules[0].Limits[0].Concurrency, c.Rules[1].Limits[0].Concurrency, c.Rules[2].Limits[0].Concurrency}
	want := []Concurrency{{MaxPercent: 10}, {MaxPercent: 2.5, Per: PerAZ}, {Max: 3}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rule %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := c.UsesPercent(); strings.Join(s, ",") != "fleet,az" {
		t.Fatalf("UsesPercent = %v; want fleet, az", s)
	}
	if _, err := decode(`{rules: [{name: x, limits: [{concurrency: {max_percent: 10, pre: az}}]}]}`); err == nil ||
		!strings.Contains(err.Error(), `unknown key "pre"`) {
		t.Fatalf("unknown key: %v", err)
	}
	bad := Config{Rules: []Rule{{Name: "x", Limits: []Limit{
		{Concurrency: Concurrency{Max: 2, MaxPercent: 10}},
	}}, {Name: "y", Limits: []Limit{{Concurrency: Concurrency{MaxPercent: 120, Per: "region"}}}},
		{Name: "z", Limits: []Limit{{Concurrency: Concurrency{Max: 2, Per: PerASG}}}}}}
	var msgs []string
	for _, e := range flattenErrs(bad.Validate()) {
		msgs = append(msgs, e.Error())
	}
	wantMsgs := []string{
		"rules[0].limits[0].concurrency: a number of runs or max_percent, not both",
		"rules[1].limits[0].concurrency.max_percent: must be within 0.01-100, got 120",
		`rules[1].limits[0].concurrency.per: must be one of fleet, asg, az, got "region"`,
		"rules[2].limits[0].concurrency.per: applies to max_percent only",
	}
	if strings.Join(msgs, "\n") != strings.Join(wantMsgs, "\n") {
		t.Fatalf("errors\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(wantMsgs, "\n"))
	}
}

func flattenErrs(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
