package report

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/autodiag/autodiag/internal/clock"
)

// Redactor is what reports use of redact.Redactor: the model's answer is
// redacted again before it is stored, since it may quote the output.
type Redactor interface {
	RedactString(s string) string
}

// Generator asks a provider for one report.
type Generator struct {
	cfg      Config
	provider Provider
	redactor Redactor
	clock    clock.Clock
	// initialBackoff is the first wait before a retry; tests shorten it.
	initialBackoff time.Duration
}

// DefaultInitialBackoff is the first wait before a retry; it grows by 1.5
// with jitter up to maxBackoff, always inside Config.Timeout.
const (
	DefaultInitialBackoff = 500 * time.Millisecond
	maxBackoff            = 10 * time.Second
)

// NewGenerator returns a generator; redactor nil leaves answers as they
// are (tests only), clk nil is the wall clock.
func NewGenerator(cfg Config, p Provider, redactor Redactor, clk clock.Clock) *Generator {
	if clk == nil {
		clk = clock.Wall{}
	}
	return &Generator{cfg: cfg, provider: p, redactor: redactor, clock: clk, initialBackoff: DefaultInitialBackoff}
}

// Generate writes the report of ev. It returns within Config.Timeout
// (plus the time to notice the deadline) and never an error: every failure
// is a Result with Status failed and a Reason. A ctx ending early ends the
// report failed as well.
func (g *Generator) Generate(ctx context.Context, ev Evidence) Result {
	p := BuildPrompt(ev, g.cfg.Input)
	req := Request{Model: g.cfg.Model, System: p.System, User: p.User,
		Temperature: g.cfg.Temperature, MaxTokens: g.cfg.MaxTokens, MaxAnswerBytes: g.cfg.AnswerCap()}
	start := g.clock.Now()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	cr := Retrying{Provider: g.provider, Initial: g.initialBackoff}.Do(ctx, req)
	resp, err, attempts, answered := cr.Response, cr.Err, cr.Attempts, cr.Answered
	res := Result{
		Model: g.cfg.Model, Provider: g.provider.Name(), CreatedAt: g.clock.Now().UTC(),
		InputTokens: resp.InputTokens, OutputTokens: resp.OutputTokens,
		FinishReason: resp.FinishReason, Truncated: resp.Truncated, Attempts: attempts,
	}
	res.LatencyS = res.CreatedAt.Sub(start).Seconds()
	if err != nil {
		res.Status = StatusFailed
		res.Reason = g.reason(ctx, err, answered, attempts)
		return res
	}
	res.Markdown = resp.Text
	if g.redactor != nil {
		res.Markdown = g.redactor.RedactString(res.Markdown)
	}
	// Cut after redaction, so that a secret is never cut into a part the
	// rules no longer match.
	if cut, ok := CutAnswer(res.Markdown, g.cfg.AnswerCap()); ok {
		res.Markdown, res.AnswerCut = cut, true
	}
	res.Confidence = ParseConfidence(res.Markdown)
	res.Status = StatusOK
	if resp.Truncated {
		res.Status = StatusFailed
		res.Reason = fmt.Sprintf("answer cut at max_tokens (%d; finish reason %q)", g.cfg.MaxTokens, resp.FinishReason)
	}
	return res
}

func (g *Generator) reason(ctx context.Context, err error, answered *Error, attempts int) string {
	if errors.Is(err, ErrAnswerTooLarge) {
		return fmt.Sprintf("%s: the answer passed report.max_answer_bytes (%d) and was not read further: %v",
			ErrAnswerTooLarge, g.cfg.AnswerCap(), err)
	}
	if ctx.Err() != nil {
		var pe *Error
		if cutShort := !errors.As(err, &pe) || pe.StatusCode == 0; cutShort && answered != nil {
			return fmt.Sprintf("no answer within %gs after %d attempt(s): %v (the last answer: %v)",
				g.cfg.Timeout.Seconds(), attempts, err, answered)
		}
		return fmt.Sprintf("no answer within %gs after %d attempt(s): %v", g.cfg.Timeout.Seconds(), attempts, err)
	}
	return fmt.Sprintf("after %d attempt(s): %v", attempts, err)
}

// AnswerCutMark ends an answer cut at report.max_answer_bytes.
const AnswerCutMark = "\n\n[answer cut at report.max_answer_bytes]"

// CutAnswer cuts text to at most n bytes, the mark included, at a rune
// boundary; ok is false when text fits.
func CutAnswer(text string, n int) (string, bool) {
	if len(text) <= n {
		return text, false
	}
	keep := max(n-len(AnswerCutMark), 0)
	for keep > 0 && !utf8.RuneStart(text[keep]) {
		keep--
	}
	return text[:keep] + AnswerCutMark, true
}
