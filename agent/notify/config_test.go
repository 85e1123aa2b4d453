package notify

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/configerr"
)

func TestValidateSinks(t *testing.T) {
	good := SinkConfig{Name: "incident-api", Type: TypeWebhook, URL: "https://hooks.example.com/x",
		SecretEnv: "AUTODIAG_WEBHOOK_SECRET", On: []EventType{EventFailed}, Timeout: 10 * time.Second}
	slack := SinkConfig{Name: "oncall-slack", Type: TypeSlack, URLEnv: "SLACK_WEBHOOK_URL", On: EventTypes}
	if err := ValidateSinks([]SinkConfig{good, slack}); err != nil {
		t.Fatalf("valid list: %v", err)
	}
	mod := func(f func(*SinkConfig)) SinkConfig { c := good; f(&c); return c }
	tests := []struct {
		name string
		c    SinkConfig
		key  string
		says string
	}{
		{"no name", mod(func(c *SinkConfig) { c.Name = "" }), "[0].name", "must be set"},
		{"bad name", mod(func(c *SinkConfig) { c.Name = "Oncall Slack" }), "[0].name", "lower case"},
		{"bad type", mod(func(c *SinkConfig) { c.Type = "email" }), "[0].type", "must be one of slack, webhook, zabbix, pagerduty, opsgenie"},
		{"no url", mod(func(c *SinkConfig) { c.URL = "" }), "[0].url", "one of url and url_env"},
		{"both urls", mod(func(c *SinkConfig) { c.URLEnv = "X" }), "[0].url", "exclusive"},
		{"http", mod(func(c *SinkConfig) { c.URL = "http://hooks.example.com/" }), "[0].url", "allow_http"},
		{"ftp", mod(func(c *SinkConfig) { c.URL = "ftp://h/" }), "[0].url", "https"},
		{"credentials in the file", mod(func(c *SinkConfig) { c.URL = "https://u:pw@h/" }), "[0].url", "url_env"},
		{"bad env name", mod(func(c *SinkConfig) { c.URL, c.URLEnv = "", "NOT-A-VAR" }), "[0].url_env", "not an environment variable"},
		{"bad secret env", mod(func(c *SinkConfig) { c.SecretEnv = "1X" }), "[0].secret_env", "not an environment variable"},
		{"no events", mod(func(c *SinkConfig) { c.On = nil }), "[0].on", "at least one"},
		{"unknown event", mod(func(c *SinkConfig) { c.On = []EventType{EventFailed, "exploded"} }), "[0].on[1]", "exploded"},
		{"timeout too long", mod(func(c *SinkConfig) { c.Timeout = 2 * time.Minute }), "[0].timeout", "between"},
		{"secret on slack", SinkConfig{Name: "s", Type: TypeSlack, URLEnv: "U", SecretEnv: "S", On: EventTypes}, "[0].secret_env", "Slack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateSinks([]SinkConfig{tt.c})
			var ce *configerr.Error
			if !errors.As(err, &ce) || ce.Key != tt.key || !strings.Contains(ce.Err.Error(), tt.says) {
				t.Fatalf("got %v, want %s: …%s…", err, tt.key, tt.says)
			}
		})
	}
	if err := ValidateSinks([]SinkConfig{good, good}); err == nil || !strings.Contains(err.Error(), "[1].name") {
		t.Errorf("duplicate name: %v", err)
	}
	allowed := mod(func(c *SinkConfig) { c.URL, c.AllowHTTP = "http://127.0.0.1:8080/", true })
	if err := ValidateSinks([]SinkConfig{allowed}); err != nil {
		t.Errorf("allow_http: %v", err)
	}
}

func TestNewSinksReadsSecretsFromTheEnvironment(t *testing.T) {
	const secretURL = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
	list := []SinkConfig{
		{Name: "slack", Type: TypeSlack, URLEnv: "SLACK_URL", On: []EventType{EventFailed}},
		{Name: "hook", Type: TypeWebhook, URL: "https://h.example/", SecretEnv: "HOOK_KEY", On: []EventType{EventFailed}},
	}
	env := map[string]string{"SLACK_URL": secretURL, "HOOK_KEY": "k"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	sinks, err := NewSinks(list, getenv, nil)
	if err != nil || len(sinks) != 2 {
		t.Fatalf("NewSinks: %v %v", sinks, err)
	}
	if sinks[0].Timeout() != DefaultTimeout || !sinks[0].Wants(EventFailed) || sinks[0].Wants(EventSucceeded) {
		t.Errorf("sink settings: timeout %s", sinks[0].Timeout())
	}

	delete(env, "HOOK_KEY")
	env["SLACK_URL"] = "http://hooks.slack.com/services/T000/B000/XXXXSECRET"
	_, err = NewSinks(list, getenv, nil)
	if err == nil || !strings.Contains(err.Error(), "HOOK_KEY is not set") || !strings.Contains(err.Error(), "SLACK_URL") {
		t.Fatalf("got %v, want both variables named", err)
	}
	if strings.Contains(err.Error(), "XXXXSECRET") {
		t.Fatalf("the error holds the secret URL: %v", err)
	}
}

func TestValidateMaxAge(t *testing.T) {
	for d, ok := range map[time.Duration]bool{0: true, time.Hour: true, 24 * time.Hour: true, time.Second: false, -1: false, 200 * time.Hour: false} {
		if err := ValidateMaxAge(d); (err == nil) != ok {
			t.Errorf("%s: %v", d, err)
		}
	}
}

func TestValidateClaimIdle(t *testing.T) {
	sinks := []SinkConfig{{Name: "a", Timeout: 3 * time.Second}, {Name: "b"}} // b: DefaultTimeout
	for _, c := range []struct {
		idle time.Duration
		key  string // "" = valid
	}{
		{0, ""},
		{2 * DefaultTimeout, ""},
		{2*DefaultTimeout - time.Millisecond, "notify[1].timeout"},
		{time.Second, "notify_claim_idle"},
		{2 * time.Hour, "notify_claim_idle"},
	} {
		err := ValidateClaimIdle(c.idle, sinks)
		if (err == nil) != (c.key == "") || (err != nil && !strings.Contains(err.Error(), c.key)) {
			t.Errorf("%s: %v, want a problem with %q", c.idle, err, c.key)
		}
	}
}

// The example section decodes strictly and validates.
func TestSinksFromYAML(t *testing.T) {
	const doc = `
notify:
  - name: oncall-slack
    type: slack                  # slack | webhook
    url_env: SLACK_WEBHOOK_URL   # a secret URL comes from the environment
    on: [failed, timed_out, report, drain_failed]
  - name: incident-api
    type: webhook
    url: https://hooks.example.com/autodiag
    secret_env: AUTODIAG_WEBHOOK_SECRET   # HMAC-SHA256 of the body
    on: [succeeded, failed, timed_out, rate_limited, report, drain_started, drain_completed, drain_failed]
    timeout: 10s
notify_max_age: 24h
`
	var cfg struct {
		Notify       []SinkConfig  `yaml:"notify"`
		NotifyMaxAge time.Duration `yaml:"notify_max_age"`
	}
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := ValidateSinks(cfg.Notify); err != nil {
		t.Fatal(err)
	}
	if err := ValidateMaxAge(cfg.NotifyMaxAge); err != nil {
		t.Fatal(err)
	}
	if cfg.Notify[1].Timeout != 10*time.Second || cfg.Notify[0].EffectiveTimeout() != DefaultTimeout || len(cfg.Notify[1].On) != 8 {
		t.Errorf("decoded %+v", cfg.Notify)
	}
}

func TestValidateOutboxMax(t *testing.T) {
	for _, tt := range []struct {
		n  int
		ok bool
	}{{0, true}, {MinOutboxMax, true}, {DefaultMaxLen, true}, {MaxOutboxMax, true}, {MinOutboxMax - 1, false}, {-1, false}, {MaxOutboxMax + 1, false}} {
		err := ValidateOutboxMax(tt.n)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateOutboxMax(%d) = %v, want ok=%v", tt.n, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "notify_outbox_max") {
			t.Errorf("error %q does not name notify_outbox_max", err)
		}
	}
}
