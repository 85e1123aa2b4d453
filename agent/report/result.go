package report

import (
	"math"
	"regexp"
	"strings"
	"time"
)

// Statuses of a Result.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusRateLimited = "rate_limited"
	StatusSkipped     = "skipped"
)

// Confidence values the prompt asks for.
const (
	ConfidenceConfirmed    = "confirmed"
	ConfidenceLikely       = "likely"
	ConfidenceInconclusive = "inconclusive"
)

// Result is a report as the task record holds it (`report` of GET
// /v1/tasks/{id}).
type Result struct {
	Status       string  `json:"status"`
	Markdown     string  `json:"markdown,omitempty"`
	Confidence   string  `json:"confidence,omitempty"`
	Model        string  `json:"model,omitempty"`
	Provider     string  `json:"provider,omitempty"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	LatencyS     float64 `json:"latency_s"`
	FinishReason string  `json:"finish_reason,omitempty"`
	Truncated    bool    `json:"truncated,omitempty"`
	// AnswerCut: the answer passed report.max_answer_bytes and was cut
	// there, at a rune boundary, and marked with AnswerCutMark.
	AnswerCut bool      `json:"answer_cut,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Reason says why a report is not ok: the provider's error, "cut at
	// max_tokens", the limiter's denial, "older than max_age".
	Reason string `json:"reason,omitempty"`
	// Attempts is how many requests were sent (0: none).
	Attempts int `json:"attempts"`
	// Investigation is the record of the tool loop when
	// report.investigate is set: steps, tool calls, gaps, evidence.
	Investigation *Investigation `json:"investigation,omitempty"`
	// ResolvedAt is when the alert the report is on resolved (its
	// source said so); nil while it has not.
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// Answer is the model's structured answer (its evidence only the
	// verified citations); Markdown is rendered from it. Nil for a
	// single-shot report and an unstructured one.
	Answer *Answer `json:"answer,omitempty"`
	// Grounding is what the agent checked of the answer's citations.
	Grounding *Grounding `json:"grounding,omitempty"`
	// Unstructured: the model gave no valid structured answer after one
	// corrective turn; Markdown is its free text, and nothing in it was
	// checked.
	Unstructured bool `json:"unstructured,omitempty"`
}

var confidenceRE = regexp.MustCompile(`(?is)confidence\W*?(?:[:\-–]|\n)\W*(confirmed|likely|inconclusive)\b`)

// ParseConfidence finds the Confidence section's word in a report; "" when
// the report has none.
func ParseConfidence(md string) string {
	m := confidenceRE.FindAllStringSubmatch(md, -1)
	if len(m) == 0 {
		return ""
	}
	return strings.ToLower(m[len(m)-1][1])
}

// finite makes every number of r one that JSON can hold and a counter
// can take: a NaN or infinite float is 0, a count below zero is 0. The
// numbers come from a model endpoint and the configuration; a record that
// cannot be stored would lose the report.
func (r *Result) finite() {
	r.LatencyS = finiteOrZero(r.LatencyS)
	r.InputTokens, r.OutputTokens = max(r.InputTokens, 0), max(r.OutputTokens, 0)
	if inv := r.Investigation; inv != nil {
		inv.CostUSD = finiteOrZero(inv.CostUSD)
		inv.InputTokens, inv.OutputTokens = max(inv.InputTokens, 0), max(inv.OutputTokens, 0)
		for i := range inv.Steps {
			st := &inv.Steps[i]
			st.LatencyS = finiteOrZero(st.LatencyS)
			st.InputTokens, st.OutputTokens = max(st.InputTokens, 0), max(st.OutputTokens, 0)
		}
	}
}

func finiteOrZero(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
