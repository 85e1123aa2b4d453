package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
)

// CategoryUnknown is the category of an answer whose evidence does not
// establish a cause.
const CategoryUnknown = "unknown"

// DefaultCategories is the taxonomy of root causes an answer's category
// is taken from; report.categories adds to it.
var DefaultCategories = []string{
	"disk_full", "inode_exhaustion", "deleted_file_held", "oom_kill", "dns_failure", "port_mismatch",
	"cert_expired", "clock_skew", "dependency_down", "config_error", "resource_saturation", CategoryUnknown,
}

// categoryRE is what a category added in the config may look like: it is
// a JSON-schema enum value, a metric-free label and a word people read.
var categoryRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// Categories is DefaultCategories followed by extra (the config's
// report.categories), without repeats.
func Categories(extra []string) []string {
	out := slices.Clone(DefaultCategories)
	for _, c := range extra {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// Answer is the model's structured answer: the fields the Markdown people
// read is rendered from, and the only thing the grader reads.
type Answer struct {
	RootCause  string     `json:"root_cause"`
	Category   string     `json:"category"`
	Confidence string     `json:"confidence"`
	Evidence   []Citation `json:"evidence"`
	Gaps       []string   `json:"gaps"`
	Impact     string     `json:"impact"`
	NextSteps  []string   `json:"next_steps"`
}

// Citation is one claim and the line of a task's output that supports it.
type Citation struct {
	TaskID string `json:"task_id"`
	Quote  string `json:"quote"`
	Claim  string `json:"claim"`
}

// Bounds of an Answer: what a model writes is cut to them before it is
// checked or stored.
const (
	maxCitations   = 20
	maxListItems   = 10
	maxQuoteBytes  = 1000
	maxFieldBytes  = 2000
	maxItemBytes   = 500
	maxTaskIDBytes = 128
)

// AnswerToolName is the tool a model without a JSON-schema answer mode
// calls to answer.
const AnswerToolName = "submit_report"

// AnswerSchema is the JSON Schema of an Answer with categories as the
// category's enum. Every property is required and no other is allowed, as
// OpenAI's strict mode wants.
func AnswerSchema(categories []string) json.RawMessage {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	list := func(desc string) map[string]any {
		return map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": desc}
	}
	citation := map[string]any{"type": "object", "additionalProperties": false,
		"required": []string{"task_id", "quote", "claim"},
		"properties": map[string]any{
			"task_id": str("The id of the task whose output holds the quote."),
			"quote":   str("One line copied exactly from that task's output."),
			"claim":   str("What the line shows."),
		}}
	schema := map[string]any{"type": "object", "additionalProperties": false,
		"required": []string{"root_cause", "category", "confidence", "evidence", "gaps", "impact", "next_steps"},
		"properties": map[string]any{
			"root_cause": str("The root cause in one sentence."),
			"category": map[string]any{"type": "string", "enum": categories,
				"description": "The class of the root cause; unknown when the evidence does not establish one."},
			"confidence": map[string]any{"type": "string", "enum": []string{ConfidenceConfirmed, ConfidenceLikely, ConfidenceInconclusive},
				"description": "confirmed only when a quoted line shows the cause."},
			"evidence":   map[string]any{"type": "array", "items": citation, "description": "The lines the answer relies on."},
			"gaps":       list("What could not be checked."),
			"impact":     str("What is or will be affected, as far as the evidence shows."),
			"next_steps": list("Two or three concrete commands or checks, most useful first."),
		}}
	b, _ := json.Marshal(schema)
	return b
}

// ParseAnswer reads a model's answer: a JSON object (alone, or in a code
// fence) of the schema. It cuts every string to its bound and fails,
// saying what is wrong, when a field is missing or out of its set.
func ParseAnswer(text string, categories []string) (Answer, error) {
	var a Answer
	s := strings.TrimSpace(text)
	i, j := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}')
	if i < 0 || j < i {
		return a, errors.New("the answer is not a JSON object")
	}
	if err := json.Unmarshal([]byte(s[i:j+1]), &a); err != nil {
		return a, fmt.Errorf("the answer is not a JSON object of the schema: %w", err)
	}
	return a, a.normalise(categories)
}

// normalise cuts a's strings to their bounds and checks its fields.
func (a *Answer) normalise(categories []string) error {
	var errs []error
	a.RootCause = utf8cut.Head(strings.TrimSpace(a.RootCause), maxFieldBytes)
	a.Impact = utf8cut.Head(strings.TrimSpace(a.Impact), maxFieldBytes)
	a.Category = strings.ToLower(strings.TrimSpace(a.Category))
	a.Confidence = strings.ToLower(strings.TrimSpace(a.Confidence))
	if a.RootCause == "" {
		errs = append(errs, errors.New("root_cause is empty"))
	}
	if !slices.Contains(categories, a.Category) {
		errs = append(errs, fmt.Errorf("category %q is not one of %s", utf8cut.Head(a.Category, 64), strings.Join(categories, ", ")))
	}
	switch a.Confidence {
	case ConfidenceConfirmed, ConfidenceLikely, ConfidenceInconclusive:
	default:
		errs = append(errs, fmt.Errorf("confidence %q is not confirmed, likely or inconclusive", utf8cut.Head(a.Confidence, 64)))
	}
	if len(a.Evidence) > maxCitations {
		a.Evidence = a.Evidence[:maxCitations]
	}
	for i := range a.Evidence {
		c := &a.Evidence[i]
		c.TaskID = utf8cut.Head(strings.TrimSpace(c.TaskID), maxTaskIDBytes)
		c.Quote = utf8cut.Head(c.Quote, maxQuoteBytes)
		c.Claim = utf8cut.Head(strings.TrimSpace(c.Claim), maxItemBytes)
	}
	a.Gaps = cutList(a.Gaps)
	a.NextSteps = cutList(a.NextSteps)
	return errors.Join(errs...)
}

func cutList(l []string) []string {
	var out []string
	for _, s := range l {
		if s = strings.TrimSpace(s); s != "" && len(out) < maxListItems {
			out = append(out, utf8cut.Head(s, maxItemBytes))
		}
	}
	return out
}

// Redact redacts every string of a (what the model wrote may hold what
// looks like a secret).
func (a *Answer) Redact(r Redactor) {
	if r == nil {
		return
	}
	a.RootCause, a.Impact = r.RedactString(a.RootCause), r.RedactString(a.Impact)
	for i := range a.Evidence {
		c := &a.Evidence[i]
		c.TaskID, c.Quote, c.Claim = r.RedactString(c.TaskID), r.RedactString(c.Quote), r.RedactString(c.Claim)
	}
	for i := range a.Gaps {
		a.Gaps[i] = r.RedactString(a.Gaps[i])
	}
	for i := range a.NextSteps {
		a.NextSteps[i] = r.RedactString(a.NextSteps[i])
	}
}
