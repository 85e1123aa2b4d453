package report

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/configerr"
	"github.com/autodiag/autodiag/limiter"
)

// TestConfigYAML: the section of the README decodes to DefaultConfig
// (enabled aside).
func TestConfigYAML(t *testing.T) {
	const doc = `
enabled: true
provider: bedrock
model: amazon.nova-lite-v1:0
base_url: ""
api_key_env: ""
on: [failed, timed_out]
temperature: 0.2
max_tokens: 1024
timeout: 60s
workers: 2
input: {max_lines: 200, max_bytes: 16KiB}
limits:
  - min_interval: 3m
  - daily: 100
guardrail: {id: "", version: ""}
max_age: 1h
max_answer_bytes: 64KiB
`
	got := DefaultConfig()
	if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Enabled = true
	if got.Enabled != want.Enabled || got.Provider != want.Provider || got.Model != want.Model ||
		strings.Join(got.On, ",") != "failed,timed_out" || got.Temperature != 0.2 || got.MaxTokens != 1024 ||
		got.Timeout != time.Minute || got.Workers != 2 || got.Input != want.Input || got.MaxAge != time.Hour ||
		len(got.Limits) != 2 || got.Limits[0].MinInterval != 3*time.Minute || got.Limits[1].Daily != 100 {
		t.Fatalf("decoded %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if !got.Wants("failed") || got.Wants("succeeded") {
		t.Fatal("Wants")
	}
}

func keys(err error) []string {
	var out []string
	for _, e := range flatten(err) {
		var ce *configerr.Error
		if errors.As(e, &ce) {
			out = append(out, ce.Key)
		} else {
			out = append(out, "?"+e.Error())
		}
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		keys string
	}{
		{"default (disabled) is valid", func(*Config) {}, ""},
		{"enabled without model", func(c *Config) { c.Enabled, c.Model = true, "" }, "model"},
		{"openai without base_url and key var", func(c *Config) { c.Enabled, c.Provider = true, ProviderOpenAI }, "base_url,api_key_env"},
		{"openai complete", func(c *Config) {
			c.Enabled, c.Provider, c.BaseURL, c.APIKeyEnv = true, ProviderOpenAI, "https://x/v1", "K"
		}, ""},
		{"unknown provider", func(c *Config) { c.Provider = "azure" }, "provider"},
		{"bad values", func(c *Config) {
			c.On = []string{"failed", "exploded"}
			c.Temperature, c.MaxTokens, c.Timeout, c.Workers, c.MaxAge = 3, 0, 0, 0, 0
			c.Input = Input{}
		}, "on[1],temperature,max_tokens,timeout,workers,input.max_lines,input.max_bytes,max_age"},
		{"guardrail without version", func(c *Config) { c.Guardrail.ID = "gr" }, "guardrail.version"},
		{"bad limit", func(c *Config) { c.Limits = []limiter.Limit{{Daily: 1, MinInterval: time.Minute}} }, "limits[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if got := strings.Join(keys(err), ","); !strings.HasPrefix(got, tc.keys) || (tc.keys == "") != (err == nil) {
				t.Fatalf("keys %q, want %q (%v)", got, tc.keys, err)
			}
		})
	}
}

func TestCheckEnv(t *testing.T) {
	c := DefaultConfig()
	c.Enabled, c.Provider, c.BaseURL, c.APIKeyEnv = true, ProviderOpenAI, "http://x/v1", "REPORT_KEY"
	none := func(string) (string, bool) { return "", false }
	if err := c.CheckEnv(none); err == nil || !strings.Contains(err.Error(), "api_key_env") || !strings.Contains(err.Error(), "REPORT_KEY") {
		t.Fatalf("CheckEnv = %v", err)
	}
	if err := c.CheckEnv(func(string) (string, bool) { return "k", true }); err != nil {
		t.Fatal(err)
	}
}
