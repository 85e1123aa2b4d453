package report

import (
	"fmt"
	"strings"
	"unicode"
)

// Grounding is what the agent checked of an answer's citations before the
// report was stored: how many were cited, how many were verified (they
// stay in Answer.Evidence) and the rest with why (they are dropped from
// the evidence).
type Grounding struct {
	Cited      int          `json:"cited"`
	Verified   int          `json:"verified"`
	Unverified []Unverified `json:"unverified"`
	// Lowered says why the confidence is lower than the model's, when it
	// is: "confirmed" needs a verified citation of a task that ran.
	Lowered string `json:"lowered,omitempty"`
}

// Unverified is a citation the agent could not verify, and why.
type Unverified struct {
	TaskID string `json:"task_id"`
	Quote  string `json:"quote"`
	Claim  string `json:"claim,omitempty"`
	// Result is one of the Citation* results other than verified.
	Result string `json:"result"`
	Reason string `json:"reason"`
}

// Results of checking one citation.
const (
	CitationVerified      = "verified"
	CitationUnknownTask   = "unknown_task"
	CitationNotRun        = "task_not_run"
	CitationQuoteNotFound = "quote_not_found"
	CitationQuoteTooShort = "quote_too_short"
)

// CitationResults are every result a citation check has, for metrics.
var CitationResults = []string{CitationVerified, CitationUnknownTask, CitationNotRun, CitationQuoteNotFound, CitationQuoteTooShort}

// minQuote is the shortest quote checked (after whitespace is
// normalised): a quote of a few characters occurs in almost any output
// and shows nothing.
const minQuote = 6

// Source is a task an answer may cite: its redacted output, and whether
// it ran (a task that was refused or rate limited has no output to cite).
type Source struct {
	Output string
	Ran    bool
}

// Ground checks a's citations against sources (the tasks of the
// investigation and its parent, by id): each task id must be one of them
// and have run, and each quote must occur in its output with whitespace
// normalised. Citations that fail move to Unverified with their reason; a
// "confirmed" answer without a verified citation is lowered to "likely"
// and Lowered says why. It returns the Grounding and each citation's
// result, in order.
func Ground(a *Answer, sources map[string]Source) (Grounding, []string) {
	g := Grounding{Cited: len(a.Evidence), Unverified: []Unverified{}}
	var kept []Citation
	results := make([]string, 0, len(a.Evidence))
	norm := map[string]string{}
	for _, c := range a.Evidence {
		res, reason := CitationVerified, ""
		src, ok := sources[c.TaskID]
		q := normaliseSpace(trimQuoteMarks(c.Quote))
		switch {
		case !ok:
			res, reason = CitationUnknownTask, fmt.Sprintf("task %q is not a task of this investigation or its parent", c.TaskID)
		case !src.Ran:
			res, reason = CitationNotRun, fmt.Sprintf("task %s did not run: it has no output to quote", c.TaskID)
		case len(q) < minQuote:
			res, reason = CitationQuoteTooShort, fmt.Sprintf("the quote has fewer than %d characters", minQuote)
		default:
			out, seen := norm[c.TaskID]
			if !seen {
				out = normaliseSpace(src.Output)
				norm[c.TaskID] = out
			}
			if !strings.Contains(out, q) {
				res, reason = CitationQuoteNotFound, fmt.Sprintf("the quote does not occur in the output of task %s", c.TaskID)
			}
		}
		results = append(results, res)
		if res == CitationVerified {
			kept = append(kept, c)
			continue
		}
		g.Unverified = append(g.Unverified, Unverified{TaskID: c.TaskID, Quote: c.Quote, Claim: c.Claim, Result: res, Reason: reason})
	}
	a.Evidence = kept
	g.Verified = len(kept)
	if a.Confidence == ConfidenceConfirmed && g.Verified == 0 {
		a.Confidence = ConfidenceLikely
		g.Lowered = "confirmed needs at least one verified citation of a task that ran; none of the answer's " +
			fmt.Sprint(g.Cited) + " citations was verified"
	}
	return g, results
}

// normaliseSpace collapses every run of white space to one space and
// trims the ends: a quote copied across a line break or with its
// alignment changed still matches.
func normaliseSpace(s string) string {
	return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
}

// trimQuoteMarks takes off the backticks or quotation marks a model puts
// around a quote.
func trimQuoteMarks(s string) string {
	s = strings.TrimSpace(s)
	for _, p := range [][2]string{{"`", "`"}, {`"`, `"`}, {"“", "”"}, {"'", "'"}} {
		if len(s) >= len(p[0])+len(p[1]) && strings.HasPrefix(s, p[0]) && strings.HasSuffix(s, p[1]) {
			s = strings.TrimSpace(s[len(p[0]) : len(s)-len(p[1])])
		}
	}
	return s
}
