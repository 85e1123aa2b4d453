package redact

import (
	"strings"
	"sync"
)

// The maintained rule set is gitleaks' default configuration: the TOML
// string its config package exports (config.DefaultConfig), turned into a
// Go table (gitleaksConfig, in gitleaks_table.go) by go generate. Linking
// the config package to parse it at start would bring viper, HCL, INI,
// dotenv, a second YAML library and go-toml with it (about 0.4 MB) and
// spend the parse at every start; TestGitleaksTable holds the table to
// what the TOML of the required version gives.
//
//go:generate go test -run ^TestGitleaksTable$ -update .
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
var gitleaksRules = sync.OnceValue(func() []Rule {
	c := gitleaksConfig
	global := c.Allowlist.allow()
	var out []Rule
	for _, r := range c.Rules {
		if r.Regex == "" {
			continue
		}
		rule := Rule{
			Name:        strings.ReplaceAll(r.ID, "-", "_"),
			Pattern:     r.Regex,
			SecretGroup: r.SecretGroup,
			Entropy:     r.Entropy,
			Keywords:    r.Keywords,
			Allow:       []Allow{global},
		}
		if r.ID != "generic-api-key" {
			// generic-api-key finds a value by its key, not a token by
			// its shape: its own end keeps "key: a.b.c…" prose out.
			rule.Pattern = widen.Replace(r.Regex)
		}
		for _, a := range r.Allowlists {
			rule.Allow = append(rule.Allow, a.allow())
		}
		rule.Allow = append(rule.Allow, extraAllow[r.ID]...)
		out = append(out, rule)
	}
	return out
})

// glSecretEnd is how most gitleaks patterns end a secret: a quote, a
// space, ';', an escaped line end or the end of text. Output puts tokens
// in prose, paths, URLs, escaped JSON and brackets ("… sk_live_….",
// "SG.…!", `\"npm_…\"`, "(TOKEN)", "TOKEN/", "TOKEN%26"), so secretEnd is
// any byte that no token body holds (a letter, a digit, '_' or '-'): it
// widens what is found and never lets a secret run longer, since every
// pattern's body stops at such a byte or reaches past it by itself.
const (
	glSecretEnd = `(?:[\x60'"\s;]|\\[nr]|$)`
	secretEnd   = `(?:[^0-9A-Za-z_-]|$)`
)

// widen rewrites gitleaks' bounds of a secret into ones any non-token
// byte satisfies (secretEnd). Azure AD client secrets hold '.' and '~', so
// their bounds exclude only those and the letters and digits.
var widen = strings.NewReplacer(
	glSecretEnd, secretEnd,
	`(?:^|[\\'"\x60\s>=:(,)])`, `(?:^|[^a-zA-Z0-9_~])`,
	`(?:$|[\\'"\x60\s<),])`, `(?:$|[^a-zA-Z0-9_~-])`,
)

// extraAllow are allowlists output needs beside gitleaks' own: a token
// rule whose end is widened would take a C function name
// (GLC_Upload…(…)) or a file name (video_box.ico-<hash>.png) for a token,
// and a private-key match may join two blocks of one output.
var extraAllow = map[string][]Allow{
	// A glc_ token is base64 of JSON: it holds digits.
	"grafana-cloud-api-token": {{Regexes: []string{`^[^0-9]+$`}}},
	"infracost-api-token":     {{Target: "line", Regexes: []string{`[/.]ico-[a-zA-Z0-9]{32}\.`}}},
	// A match that runs past its own END line joined a short block
	// ("-----BEGIN PRIVATE KEY-----\n...\n-----END…") to the next one;
	// private_key_block finds each real block on its own.
	"private-key": {{Target: "match", Regexes: []string{`-----END[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----[\s\S]`}}},
}

func (a glAllowlist) allow() Allow {
	return Allow{
		All:       strings.EqualFold(a.Condition, "AND"),
		Target:    a.RegexTarget,
		Regexes:   a.Regexes,
		Stopwords: a.Stopwords,
		Never:     strings.EqualFold(a.Condition, "AND") && len(a.Paths)+len(a.Commits) > 0,
	}
}
