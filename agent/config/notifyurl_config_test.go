package config

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/notify"
)

// A notify URL may not point at the metadata service nor at the agent's
// own admin address (POST /v1/drain).
func TestNotifyURLNotAgainstTheFleet(t *testing.T) {
	tests := []struct {
		url  string
		want string // "" = accepted
	}{
		{"https://hooks.example.com/x", ""},
		{"http://127.0.0.1:8080/hook", ""},
		{"http://169.254.169.254/latest/meta-data/", "metadata"},
		{"http://127.0.0.1:9464/v1/drain", "admin"},
		{"http://localhost:9464/v1/drain", "admin"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.AdminAddr = "127.0.0.1:9464"
		c.Notify = []notify.SinkConfig{{Name: "w", Type: notify.TypeWebhook, URL: tt.url, AllowHTTP: true,
			On: []notify.EventType{notify.EventTypes[0]}}}
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil && strings.Contains(err.Error(), "notify"):
			t.Errorf("%s refused: %v", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), "notify[0].url") || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want a notify[0].url problem saying %q", tt.url, err, tt.want)
		}
	}
}

// TestOutboundURLsNotAgainstTheAgent: the model's base_url and the
// collector's endpoint meet the notify URLs' rule: none reaches the agent's
// own admin address, where a POST could drain it.
func TestOutboundURLsNotAgainstTheAgent(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Config, string)
		key  string
	}{
		{"report", func(c *Config, u string) { c.Report.BaseURL = u }, "report.base_url"},
		{"tracing", func(c *Config, u string) { c.Tracing.Endpoint = u }, "tracing.endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, u := range []string{"http://127.0.0.1:9464/v1", "http://localhost:9464", "http://[::1]:9464/v1"} {
				c := DefaultConfig()
				c.AdminAddr = "127.0.0.1:9464"
				tt.set(&c, u)
				err := c.Validate()
				if err == nil || !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), "admin") {
					t.Errorf("%s: %s: got %v, want a %s problem naming the admin address", tt.key, u, err, tt.key)
				}
			}
			c := DefaultConfig()
			c.AdminAddr = "127.0.0.1:9464"
			tt.set(&c, "http://127.0.0.1:8000/v1")
			if err := c.Validate(); err != nil && strings.Contains(err.Error(), tt.key) {
				t.Errorf("a local server on another port refused: %v", err)
			}
		})
	}
}
