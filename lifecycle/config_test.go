package lifecycle

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want []string // each a line prefix; nil = valid
	}{
		{"imds with hook", func(c *Config) { c.Sources = []string{"signal", "imds"}; c.HookName = "drain" }, nil},
		{"sqs with queue", func(c *Config) { c.Sources = []string{"sqs"}; c.QueueURL = "https://sqs/q" }, nil},
		{"imds without hook", func(c *Config) { c.Sources = []string{"imds"} }, []string{"hook_name: required"}},
		{"sqs without queue", func(c *Config) { c.Sources = []string{"sqs"} }, []string{"queue_url: required"}},
		{"unknown and duplicate source", func(c *Config) { c.Sources = []string{"signal", "kafka", "signal"} },
			[]string{"sources[1]: unknown source \"kafka\"", "sources[2]: duplicate source"}},
		{"interval at half the hook timeout", func(c *Config) { c.HookHeartbeatTimeout = 2 * time.Minute; c.HeartbeatInterval = time.Minute },
			[]string{"heartbeat_interval: must be below half of hook_heartbeat_timeout (2m0s)"}},
		{"interval below half", func(c *Config) { c.HookHeartbeatTimeout = 2 * time.Minute; c.HeartbeatInterval = 59 * time.Second }, nil},
		{"unknown hook timeout allows any positive interval", func(c *Config) { c.HeartbeatInterval = 10 * time.Minute }, nil},
		{"hook timeout outside the API range", func(c *Config) { c.HookHeartbeatTimeout = 3 * time.Hour },
			[]string{"hook_heartbeat_timeout: must be between 30s and 2h0m0s"}},
		{"zero durations", func(c *Config) { c.HeartbeatInterval = 0; c.IMDSPollInterval = 0 },
			[]string{"heartbeat_interval: must be positive", "imds_poll_interval: must be positive"}},
		{"bad enum", func(c *Config) { c.OnTimeout = "CONTINUE" },
			[]string{"on_timeout: must be continue or abandon"}},
		{"every drain event with imds", func(c *Config) {
			c.Sources = []string{"imds"}
			c.HookName = "drain"
			c.DrainOn = []string{DrainOnSpot, DrainOnRebalance, DrainOnScheduled}
		}, nil},
		{"no drain event", func(c *Config) { c.DrainOn = nil }, nil},
		{"drain events without imds", func(c *Config) { c.DrainOn = []string{DrainOnSpot, DrainOnRebalance, DrainOnScheduled} },
			[]string{"drain_on[1]: rebalance_recommendation is read from instance metadata", "drain_on[2]: scheduled_event is read from instance metadata"}},
		{"unknown and duplicate drain event", func(c *Config) { c.DrainOn = []string{"spot", DrainOnSpot, DrainOnSpot} },
			[]string{"drain_on[0]: unknown event \"spot\"", "drain_on[2]: duplicate event"}},
		{"launch and lead bounds", func(c *Config) { c.LaunchTimeout = 0; c.ScheduledEventLead = -time.Second },
			[]string{"launch_timeout: must be positive", "scheduled_event_lead: must not be negative"}},
		{"launch timeout past 48h", func(c *Config) { c.LaunchHookName = "ready"; c.LaunchTimeout = 48 * time.Hour },
			[]string{"launch_timeout: must be below the lifecycle action's global timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil; want %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("Validate() = %q; want %d problems %q", lines, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("problem %d = %q; want prefix %q", i, lines[i], w)
				}
			}
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *configerr.Error
				if !errors.As(e, &ce) || !strings.HasPrefix(e.Error(), ce.Key+": ") {
					t.Errorf("problem %q is not a *configerr.Error naming its key", e)
				}
			}
		})
	}
}

func TestCheckDrainTimeout(t *testing.T) {
	for _, tt := range []struct {
		name  string
		hook  time.Duration // hook_heartbeat_timeout
		drain time.Duration
		want  string // "" = fine
	}{
		{"default", 0, 10 * time.Minute, ""},
		{"past 100 x hook timeout", 60 * time.Second, 100 * time.Minute, "drain_timeout: must be below the lifecycle action's global timeout (1h40m0s"},
		{"just below 100 x hook timeout", 60 * time.Second, 100*time.Minute - time.Second, ""},
		{"past 48h", 0, 49 * time.Hour, "drain_timeout: must be below the lifecycle action's global timeout (48h0m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.HookHeartbeatTimeout = tt.hook
			err := c.CheckDrainTimeout(tt.drain)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckDrainTimeout(%s) = %v; want nil", tt.drain, err)
				}
				return
			}
			var ce *configerr.Error
			if !errors.As(err, &ce) || ce.Key != "drain_timeout" || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("CheckDrainTimeout(%s) = %v; want a *configerr.Error %q", tt.drain, err, tt.want)
			}
		})
	}
}

// TestValidateKeysAreData: each problem is a *configerr.Error naming its key,
// so the agent prefixes the section and adds the line without parsing text.
func TestValidateKeysAreData(t *testing.T) {
	c := DefaultConfig()
	c.LaunchTimeout = 0
	c.DrainOn = []string{"x"}
	var keys []string
	for _, e := range flattenJoin(c.Validate()) {
		var ce *configerr.Error
		if !errors.As(e, &ce) {
			t.Fatalf("problem %v is a %T; want *configerr.Error", e, e)
		}
		keys = append(keys, ce.Key)
	}
	if want := []string{"launch_timeout", "drain_on[0]"}; !slices.Equal(keys, want) {
		t.Fatalf("keys = %q; want %q", keys, want)
	}
}

func flattenJoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestGlobalTimeoutAndResult(t *testing.T) {
	for _, tt := range []struct {
		hbt, want time.Duration
	}{{0, 48 * time.Hour}, {30 * time.Second, 50 * time.Minute}, {2 * time.Hour, 48 * time.Hour}} {
		if got := GlobalTimeout(tt.hbt); got != tt.want {
			t.Errorf("GlobalTimeout(%s) = %s; want %s", tt.hbt, got, tt.want)
		}
	}
	c := DefaultConfig()
	if c.CompletionResult(true) != ResultContinue {
		t.Error("on_timeout continue: want CONTINUE at the deadline")
	}
	c.OnTimeout = OnTimeoutAbandon
	if c.CompletionResult(false) != ResultContinue || c.CompletionResult(true) != ResultAbandon {
		t.Error("on_timeout abandon: want ABANDON only when the deadline was hit")
	}
}
