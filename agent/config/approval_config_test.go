package config

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/runner"
)

// approval: required parks each task of the entry for a person's
// decision; approval_timeout defaults to runner.DefaultApprovalTimeout.
// A bad value names the key and its line.
func TestCatalogApproval(t *testing.T) {
	cfg, err := Load([]byte("diagnostics:\n  - name: heap\n    command: [/usr/bin/uptime]\n    approval: required\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Diagnostics[0].WithDefaults()
	if d.Approval != runner.ApprovalRequired || d.ApprovalTimeout != runner.DefaultApprovalTimeout {
		t.Errorf("got approval %q timeout %s, want %q and %s", d.Approval, d.ApprovalTimeout, runner.ApprovalRequired, runner.DefaultApprovalTimeout)
	}
	tests := []struct {
		name, entry, key, word string
	}{
		{"unknown value", "approval: yes", "diagnostics[0].approval", "must be"},
		{"negative timeout", "approval: required\n    approval_timeout: -1s", "diagnostics[0].approval_timeout", "between"},
		{"too long", "approval: required\n    approval_timeout: 13h", "diagnostics[0].approval_timeout", "between"},
		{"timeout without approval", "approval_timeout: 5m", "diagnostics[0].approval_timeout", "nothing waits"},
		{"not shorter than max_age", "approval: required\n    approval_timeout: 1h", "diagnostics[0].approval_timeout", "queue.max_age"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yml := "diagnostics:\n  - name: heap\n    command: [/usr/bin/uptime]\n    " + tt.entry + "\n"
			_, err := Load([]byte(yml), nil)
			ps := Problems(err)
			if len(ps) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			line := 4 + strings.Count(tt.entry, "\n")
			if p := ps[0]; p.Key != tt.key || p.Line != line || !strings.Contains(p.Error(), tt.word) {
				t.Errorf("got %q (key %s, line %d), want %s at line %d saying %q", p.Error(), p.Key, p.Line, tt.key, line, tt.word)
			}
		})
	}
}
