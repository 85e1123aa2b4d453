package report

import (
	"context"
	"encoding/json"
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

// Request is one chat request: System and User, or, for a conversation
// with tools, System and Messages (User is then ignored).
type Request struct {
	Model       string
	System      string
	User        string
	Temperature float64
	MaxTokens   int
	// MaxAnswerBytes bounds the text of the answer; the provider reads at
	// most a JSON envelope's worth more than it from the wire and fails
	// with ErrAnswerTooLarge beyond that. 0 means DefaultMaxAnswerBytes.
	MaxAnswerBytes int
	// Messages is the conversation after System; the first is the user's.
	Messages []Message
	// Tools are offered to the model; none means the model answers in text.
	Tools []Tool
	// AnswerSchema, when set, asks for the answer as a JSON object of this
	// JSON Schema (OpenAI's response_format json_schema, strict). A
	// provider without such a mode ignores it; an investigation then
	// offers the submit_report tool instead.
	AnswerSchema json.RawMessage
}

// Message is one turn of a conversation with tools. Role is RoleUser (Text
// and/or ToolResults) or RoleAssistant (Text and/or ToolCalls).
type Message struct {
	Role        string
	Text        string
	ToolCalls   []ToolCall
	ToolResults []ToolResult
}

// Roles of a Message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Tool is a function the model may call: Schema is a JSON Schema object
// of its input.
type Tool struct {
	Name        string
	Description string
	Schema      json.RawMessage
}

// ToolCall is the model asking for a tool; Input is a JSON object.
type ToolCall struct {
	ID    string
	Name  string
	Input json.RawMessage
}

// ToolResult answers the ToolCall with CallID; IsError marks a refusal
// or a failure the model should read as such.
type ToolResult struct {
	CallID  string
	Text    string
	IsError bool
}

// messages is the conversation of req: Messages, or the single User turn.
func (req Request) messages() []Message {
	if len(req.Messages) > 0 {
		return req.Messages
	}
	return []Message{{Role: RoleUser, Text: req.User}}
}

// DefaultMaxAnswerBytes bounds an answer when the request does not.
const DefaultMaxAnswerBytes = 64 << 10

// envelopeCap is how many bytes of the wire may hold an answer of n bytes:
// JSON may escape every byte into six (\u00XX), plus the envelope itself.
func envelopeCap(n int) int64 {
	if n <= 0 {
		n = DefaultMaxAnswerBytes
	}
	return 6*int64(n) + 64<<10
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
	// ToolCalls are the tools the model asks for (FinishReason tool_use,
	// tool_calls); Text may then be empty.
	ToolCalls []ToolCall
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

// ErrInvalidAnswer is an answer whose numbers cannot be true: a token
// count below zero or past MaxUsageTokens. Nothing of it is used, and its
// counts are never added anywhere: a counter that cannot decrease would
// panic, a budget would grow back.
var ErrInvalidAnswer = errors.New("invalid_answer")

// MaxUsageTokens bounds each token count one answer may report: far past
// any model's context window, and small enough that sums of many stay
// exact in float64 counters and int fields.
const MaxUsageTokens = 100_000_000

// checkUsage refuses token counts that cannot be true; names are the
// provider's own field names, for the message.
func checkUsage(inName string, in int64, outName string, out int64) error {
	for _, u := range []struct {
		name string
		n    int64
	}{{inName, in}, {outName, out}} {
		if u.n < 0 || u.n > MaxUsageTokens {
			return fmt.Errorf("%w: usage %s is %d, not within [0, %d]", ErrInvalidAnswer, u.name, u.n, MaxUsageTokens)
		}
	}
	return nil
}

// maxRetryAfter caps a provider's Retry-After: a longer wait cannot fit in
// any report's timeout anyway, and the cap keeps the seconds far from
// overflowing a time.Duration.
const maxRetryAfter = time.Hour

// ErrAnswerTooLarge is an answer whose body passed the bytes allowed for
// Request.MaxAnswerBytes: the reader stopped there.
var ErrAnswerTooLarge = errors.New("answer_too_large")
