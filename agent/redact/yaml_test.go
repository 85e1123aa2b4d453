package redact

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The agent embeds Config inline in its results section; what the file
// says must reach Effective as documented.
func TestConfigFromYAML(t *testing.T) {
	type results struct {
		Config `yaml:",inline"`
	}
	tests := []struct {
		yaml string
		want int // rules in effect
	}{
		{"{}", len(DefaultRules())},
		{"redact: []", 0},
		{"redact: [{name: vault, pattern: 'hvs\\.[A-Za-z0-9]{20,}'}]", 1},
		{"redact: [{name: vault, pattern: 'hvs\\.[A-Za-z0-9]{20,}'}]\nredact_defaults: true", 1 + len(DefaultRules())},
		{"redact_defaults: true", len(DefaultRules())},
	}
	for _, tt := range tests {
		var r results
		dec := yaml.NewDecoder(strings.NewReader(tt.yaml))
		dec.KnownFields(true)
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s: %v", tt.yaml, err)
		}
		if got := len(r.Effective()); got != tt.want {
			t.Errorf("%s: %d rules, want %d", tt.yaml, got, tt.want)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", tt.yaml, err)
		}
	}
}
