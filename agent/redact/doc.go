// Package redact is the one chokepoint for secrets in diagnostic output:
// a Redactor replaces every secret its rules find with [REDACTED:<rule
// name>] before the output is stored, logged, uploaded, sent to a sink or
// put in a prompt, and counts each replacement in
// autodiag_redactions_total{name}.
//
// The default rules (DefaultRules) are gitleaks' default configuration
// (RulesSource at RulesVersion, read from the TOML string its config
// package exports, with keywords, entropy limits and allowlists) followed
// by the project's own rules for what command output holds and gitleaks
// lacks (ownRules). The rules are RE2 regular expressions, so matching
// never backtracks; a rule runs only where one of its keywords occurs, and
// a default rule is compiled only then, the first time (an idle agent does
// not hold ~220 compiled patterns).
// Config says how a list in the configuration file combines with them.
//
// Text holding URL or JSON string escapes is also searched decoded, and
// what is found there is replaced where its encoded bytes are. The
// credentials the agent holds are redacted by value (SetKnown), in their
// encoded forms too.
//
// Output is redacted before it is cut (RedactCut, Head, CutSlack): a cap
// never leaves half a secret that no rule recognises. Two corpora in
// testdata/ prove the rules: the project's (secrets in the real formats
// and look-alikes, TestCorpus) and gitleaks' own true and false positives
// (TestGitleaksCorpus); each allows no miss and no false positive, and
// TestTokenBoundaryMatrix puts every token rule's sample beside the
// punctuation that output puts around tokens.
package redact
