package redact

import (
	"fmt"
	"strings"
	"sync"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/zricethezav/gitleaks/v8/config"
)

// The maintained rule set is gitleaks' default configuration, read from
// the string its config package exports (config.DefaultConfig) and parsed
// here: linking gitleaks' scanner would cost the binary far more than the
// rule data. go-toml is the parser the config package's viper already
// links.
const (
	// RulesSource is the module whose default rules are built in.
	RulesSource = "github.com/zricethezav/gitleaks/v8"
	// RulesVersion is its version in go.mod (TestRulesVersion keeps the
	// two in step).
	RulesVersion = "v8.30.1"
)

// glAllowlist is one [[rules.allowlists]] (or the global [allowlist]) of
// gitleaks' TOML. Paths and commits never apply to command output: an
// allowlist that needs them (condition AND) never allows, and in an OR
// allowlist they are ignored.
type glAllowlist struct {
	Condition   string   `toml:"condition"`
	RegexTarget string   `toml:"regexTarget"`
	Regexes     []string `toml:"regexes"`
	Stopwords   []string `toml:"stopwords"`
	Paths       []string `toml:"paths"`
	Commits     []string `toml:"commits"`
}

type glRule struct {
	ID          string        `toml:"id"`
	Regex       string        `toml:"regex"`
	SecretGroup int           `toml:"secretGroup"`
	Entropy     float64       `toml:"entropy"`
	Keywords    []string      `toml:"keywords"`
	Allowlists  []glAllowlist `toml:"allowlists"`
}

type glConfig struct {
	Rules     []glRule    `toml:"rules"`
	Allowlist glAllowlist `toml:"allowlist"`
}

// gitleaksRules are gitleaks' default rules as Rules: the id with '-' as
// '_' is the name (it labels a metric), keywords are the prefilter, the
// rule's and the global allowlists come along. Rules without a regex
// (file-name rules) have nothing to find in output and are left out.
var gitleaksRules = sync.OnceValues(func() ([]Rule, error) {
	var c glConfig
	if err := toml.Unmarshal([]byte(config.DefaultConfig), &c); err != nil {
		return nil, fmt.Errorf("redact: gitleaks default config: %w", err)
	}
	global := c.Allowlist.allow()
	var out []Rule
	for _, r := range c.Rules {
		if r.Regex == "" {
			continue
		}
		rule := Rule{
			Name:        strings.ReplaceAll(r.ID, "-", "_"),
			Pattern:     strings.ReplaceAll(r.Regex, glSecretEnd, secretEnd),
			SecretGroup: r.SecretGroup,
			Entropy:     r.Entropy,
			Keywords:    r.Keywords,
			Allow:       []Allow{global},
		}
		for _, a := range r.Allowlists {
			rule.Allow = append(rule.Allow, a.allow())
		}
		out = append(out, rule)
	}
	return out, nil
})

// glSecretEnd is how most gitleaks patterns end a secret: a quote, a
// space, ';', an escaped line end or the end of text. Output also wraps
// tokens in brackets and lists ("failed (TOKEN)", "[TOKEN, …]", "<TOKEN>"),
// so secretEnd adds those closing bytes; it widens what is found and never
// lets a secret run longer.
const (
	glSecretEnd = `(?:[\x60'"\s;]|\\[nr]|$)`
	secretEnd   = `(?:[\x60'"\s;),\]}>|&]|\\[nr]|$)`
)

func (a glAllowlist) allow() Allow {
	return Allow{
		All:       strings.EqualFold(a.Condition, "AND"),
		Target:    a.RegexTarget,
		Regexes:   a.Regexes,
		Stopwords: a.Stopwords,
		Never:     strings.EqualFold(a.Condition, "AND") && len(a.Paths)+len(a.Commits) > 0,
	}
}
