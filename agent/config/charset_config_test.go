package config

import (
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/task"
)

const charsetYAML = `
limiter:
  hosts:
    allow: ['^web-[0-9]+$']
diagnostics:
  - name: grep-log
    command: ["/usr/bin/grep", "-F", "--", "{param.pattern}", "/var/log/app.log"]
    params: {pattern: '.{1,64}'}
    charset: {pattern: any}
  - name: disk
    command: ["/usr/bin/df", "-h", "{param.mount}"]
    params: {mount: '.*'}
`

// A value holds only the default character set unless its catalog entry
// says charset: {NAME: any}, whatever the pattern allows; config validate
// warns for each parameter that lifts it.
func TestParamCharset(t *testing.T) {
	cfg, err := Load([]byte(charsetYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := cfg.Validator()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		diag, param, val string
		ok               bool
	}{
		{"disk", "mount", "/var/lib/docker", true},
		{"disk", "mount", "user@host:/srv,a=b+c%20", true},
		{"disk", "mount", "/var; id", false},
		{"disk", "mount", "$(id)", false},
		{"disk", "mount", "`id`", false},
		{"disk", "mount", "a b", false},
		{"disk", "mount", "x|y", false},
		{"disk", "mount", "/tmp/*", false},
		{"disk", "mount", "'quoted'", false},
		{"disk", "mount", "\\x", false},
		{"grep-log", "pattern", "connection refused; retry", true},
		{"grep-log", "pattern", "$(id) and `id`", true},
	}
	for _, tt := range tests {
		t.Run(tt.diag+" "+tt.val, func(t *testing.T) {
			tk := task.Task{ID: "t1", Host: "web-1", Diagnostic: tt.diag, Params: map[string]string{tt.param: tt.val}}
			err := v.Validate(&tk, time.Now())
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%q) = %v, want ok=%v", tt.val, err, tt.ok)
			}
		})
	}
	w := cfg.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "diagnostics[0].charset.pattern") {
		t.Fatalf("warnings %q, want one naming diagnostics[0].charset.pattern", w)
	}
}

// charset names a parameter of the entry and holds only "any".
func TestParamCharsetValidated(t *testing.T) {
	for _, tt := range []struct{ yaml, key string }{
		{"diagnostics:\n  - name: d\n    command: [/usr/bin/df, '{param.x}']\n    params: {x: '.*'}\n    charset: {y: any}\n", "diagnostics[0].charset.y"},
		{"diagnostics:\n  - name: d\n    command: [/usr/bin/df, '{param.x}']\n    params: {x: '.*'}\n    charset: {x: all}\n", "diagnostics[0].charset.x"},
	} {
		_, err := Load([]byte(tt.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tt.key+" (line 5)") {
			t.Errorf("got %v, want a problem of %s on line 5", err, tt.key)
		}
	}
}
