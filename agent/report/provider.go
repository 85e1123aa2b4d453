package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Provider is one model endpoint. Complete sends one request and does not
// retry: the Generator retries, inside the report's timeout.
type Provider interface {
	// Name is the provider label of metrics and results: bedrock, openai.
	Name() string
	Complete(ctx context.Context, req Request) (Response, error)
}

// Request is one chat request.
type Request struct {
	Model       string
	System      string
	User        string
	Temperature float64
	MaxTokens   int
}

// Response is a provider's answer.
type Response struct {
	Text         string
	InputTokens  int
	OutputTokens int
	// FinishReason is the provider's own word: end_turn, max_tokens
	// (Bedrock), stop, length (OpenAI).
	FinishReason string
	// Truncated: the answer was cut at max_tokens.
	Truncated bool
}

// Error is a provider's failure with what the Generator needs to decide
// whether to retry.
type Error struct {
	Provider   string
	StatusCode int // HTTP status; 0 when there was no answer
	// RetryAfter is the provider's hint, 0 when it gave none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s: status %d: %v", e.Provider, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Provider, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable: throttling and server errors are worth another try; every
// other answer would be the same again.
func (e *Error) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// ErrEmpty is an answer without text.
var ErrEmpty = errors.New("empty answer")
