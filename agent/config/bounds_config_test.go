package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/runner"
)

// TestConfigErrorsQuoteAtMost200Bytes: a huge value is quoted by its first
// 200 bytes at most, with its length, wherever it sits, so the error stays
// small and still names the key and its line.
func TestConfigErrorsQuoteAtMost200Bytes(t *testing.T) {
	huge := strings.Repeat("a", 1<<20)
	tests := []struct {
		name, yaml, key string
	}{
		{"log_level", "log_level: %s\n", "log_level"},
		{"admin_addr", "admin_addr: %s\n", "admin_addr"},
		{"instance_id", "instance_id: %s\n", "instance_id"},
		{"unknown key", "%s: 1\n", "config"},
		{"diagnostic name", "diagnostics:\n  - name: %s\n    command: [/bin/true]\n", "diagnostics[0].name"},
		{"diagnostic program", "diagnostics:\n  - name: x\n    command: [%s]\n", "diagnostics[0].command"},
		{"allow pattern", "limiter:\n  hosts:\n    allow: ['(%s']\n", "limiter.hosts.allow[0]"},
		{"notify url", "notify:\n  - name: n\n    type: webhook\n    url: 'ftp://%s'\n    on: [failed]\n", "notify[0]"},
		{"report provider", "report:\n  provider: %s\n", "report.provider"},
		{"quoted with spaces", "log_level: '%s'\n", "log_level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := huge
			if tt.name == "quoted with spaces" {
				v = strings.Repeat("a b\" ", 1<<18)
				v = strings.ReplaceAll(v, "'", "")
			}
			_, err := Load([]byte(fmt.Sprintf(tt.yaml, v)), nil)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if len(msg) > 8<<10 {
				t.Errorf("error of %d bytes; want a few hundred", len(msg))
			}
			if strings.Contains(msg, strings.Repeat("a", 201)) {
				t.Errorf("error quotes more than 200 bytes of the value: %.400s…", msg)
			}
			if !strings.Contains(msg, tt.key) {
				t.Errorf("error does not name %s: %.600s", tt.key, msg)
			}
		})
	}
}

// TestDiagnosticsCapped: a catalog of more than 1,000 entries is refused
// with a problem naming the key, its line and the count, before its
// entries are decoded or checked one by one; 1,000 load.
func TestDiagnosticsCapped(t *testing.T) {
	catalog := func(n int) string {
		var b strings.Builder
		b.WriteString("log_level: info\ndiagnostics:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {name: d%d, command: [/bin/true]}\n", i)
		}
		return b.String()
	}
	if _, err := Load([]byte(catalog(MaxDiagnostics)), nil); err != nil {
		t.Fatalf("%d diagnostics: %v", MaxDiagnostics, err)
	}
	for _, n := range []int{MaxDiagnostics + 1, 20_000} {
		_, err := Load([]byte(catalog(n)), nil)
		ps := Problems(err)
		if len(ps) != 1 || ps[0].Key != "diagnostics" || ps[0].Line != 2 ||
			!strings.Contains(ps[0].Error(), fmt.Sprintf("holds %d entries; at most %d", n, MaxDiagnostics)) {
			t.Errorf("%d diagnostics: %v; want one problem at diagnostics (line 2) giving the count and the cap", n, err)
		}
	}
	c := DefaultConfig()
	c.Diagnostics = make([]runner.Diagnostic, MaxDiagnostics+1)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "diagnostics: holds 1001 entries") {
		t.Errorf("Validate of %d diagnostics: %v", MaxDiagnostics+1, err)
	}
}
