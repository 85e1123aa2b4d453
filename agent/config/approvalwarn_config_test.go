package config

import (
	"strings"
	"testing"
)

// A tool of investigations whose approval may take longer than an
// investigation waits is warned about (not refused: approved later, the
// task still runs), naming the key; approval within the wall time, or a
// diagnostic investigations cannot call, is not.
func TestWarnsApprovalLongerThanWallTime(t *testing.T) {
	const base = `
diagnostics:
  - {name: heapdump, command: [/bin/echo, x], investigate: %s, approval: required, approval_timeout: %s}
report: {enabled: true, provider: openai, base_url: 'http://127.0.0.1:1/v1', api_key_env: K, model: m, investigate: {wall_time: 3m}}
`
	for _, tt := range []struct {
		investigate, timeout string
		warn                 bool
	}{
		{"true", "15m", true},
		{"true", "3m", false},
		{"false", "15m", false},
	} {
		cfg, err := Load([]byte(strings.NewReplacer("%s", tt.investigate).Replace(strings.Replace(base, "approval_timeout: %s", "approval_timeout: "+tt.timeout, 1))), nil)
		if err != nil {
			t.Fatal(err)
		}
		w := cfg.Warnings()
		got := len(w) == 1 && strings.Contains(w[0], "diagnostics[0].approval_timeout") && strings.Contains(w[0], "report.investigate.wall_time")
		if got != tt.warn || len(w) > 1 {
			t.Errorf("investigate %s, approval_timeout %s: warnings %q, want a warning %v", tt.investigate, tt.timeout, w, tt.warn)
		}
	}
}
