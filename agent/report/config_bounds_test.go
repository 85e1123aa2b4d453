package report

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
)

// The adversarial report sections of the issue: each is refused under the
// key it names.
func TestConfigValidateURLAndBounds(t *testing.T) {
	openai := func(url string) func(*Config) {
		return func(c *Config) {
			c.Enabled, c.Provider, c.BaseURL, c.APIKeyEnv = true, ProviderOpenAI, url, "K"
		}
	}
	tests := []struct {
		name string
		mod  func(*Config)
		key  string // "" = valid
	}{
		{"local http model server", openai("http://127.0.0.1:8000/v1"), ""},
		{"https remote", openai("https://llm.example.com/v1"), ""},
		{"plain http to a remote host", openai("http://llm.example.com/v1"), "base_url"},
		{"user:pass in the URL", openai("https://u:p@llm.example.com/v1"), "base_url"},
		{"ftp", openai("ftp://llm.example.com/v1"), "base_url"},
		{"metadata", openai("https://169.254.169.254/latest"), "base_url"},
		{"timeout 240h", func(c *Config) { c.Timeout = 240 * time.Hour }, "timeout"},
		{"max_tokens 1e8", func(c *Config) { c.MaxTokens = 100_000_000 }, "max_tokens"},
		{"workers 1e5", func(c *Config) { c.Workers = 100_000 }, "workers"},
		{"no limits", func(c *Config) { c.Enabled, c.Limits = true, nil }, "limits"},
		{"plain http to a remote host, allowed", func(c *Config) {
			openai("http://llm.example.com/v1")(c)
			c.AllowHTTP = true
		}, ""},
		{"allow_http still refuses the metadata service", func(c *Config) {
			openai("http://169.254.169.254/latest")(c)
			c.AllowHTTP = true
		}, "base_url"},
		{"allow_http still refuses user:pass", func(c *Config) {
			openai("http://u:p@llm.example.com/v1")(c)
			c.AllowHTTP = true
		}, "base_url"},
		{"no limits, unlimited: true", func(c *Config) { c.Enabled, c.Limits, c.Unlimited = true, nil, true }, ""},
		{"limits and unlimited: true", func(c *Config) { c.Enabled, c.Unlimited = true, true }, "unlimited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if tt.key == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *configerr.Error
			if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("got %v, want a problem at %s", err, tt.key)
			}
		})
	}
}

// TestConfigHTTPBaseURLNamesAllowHTTP: refusing a plain http base_url
// names the key that allows it, so the way out is in the message.
func TestConfigHTTPBaseURLNamesAllowHTTP(t *testing.T) {
	c := DefaultConfig()
	c.Enabled, c.Provider, c.BaseURL, c.APIKeyEnv = true, ProviderOpenAI, "http://llm.example.com/v1", "K"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "use https, or set report.allow_http: true") {
		t.Fatalf("got %v, want the http refusal to name report.allow_http", err)
	}
	c.BaseURL = "ftp://llm.example.com/v1"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "allow_http") {
		t.Fatalf("got %v, want a refusal that does not offer allow_http (it would not help)", err)
	}
}
