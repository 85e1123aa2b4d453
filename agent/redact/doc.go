// Package redact is the one chokepoint for secrets in diagnostic output:
// a Redactor replaces every match of its rules with [REDACTED:<rule name>]
// before the output is stored, logged, uploaded, sent to a sink or put in
// a prompt, and counts each replacement in autodiag_redactions_total{name}.
//
// The rules are regular expressions (RE2, so matching is linear in the
// input and never backtracks). The built-in rules (DefaultRules) cover AWS
// keys, PEM private keys, Authorization headers, passwords in URLs and
// assignments, and Slack, GitHub and sk- style tokens; Config says how a
// list in the configuration file combines with them.
package redact
