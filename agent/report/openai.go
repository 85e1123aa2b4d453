package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// OpenAI is the provider of any OpenAI-compatible chat completions server
// (OpenAI, vLLM, Ollama, LiteLLM): one POST {base}/chat/completions with
// its own JSON types, so that the binary carries only what it sends.
type OpenAI struct {
	url    string
	apiKey string
	hc     *http.Client
}

var _ Provider = (*OpenAI)(nil)

// NewOpenAI returns the provider on baseURL (e.g. http://vllm:8000/v1)
// with apiKey, the value of report.api_key_env that the program read.
// hc nil means http.DefaultClient. It never retries: the Generator
// retries within the timeout.
func NewOpenAI(baseURL, apiKey string, hc *http.Client) *OpenAI {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &OpenAI{url: strings.TrimRight(baseURL, "/") + "/chat/completions", apiKey: apiKey, hc: hc}
}

// Name implements Provider.
func (*OpenAI) Name() string { return ProviderOpenAI }

// The wire types of Chat Completions: what autodiag sends and reads.
type (
	chatRequest struct {
		Model       string        `json:"model"`
		Messages    []chatMessage `json:"messages"`
		Temperature float64       `json:"temperature"`
		MaxTokens   int           `json:"max_tokens"`
		Tools       []chatTool    `json:"tools,omitempty"`
		// ResponseFormat asks for a JSON object of a schema.
		ResponseFormat *responseFormat `json:"response_format,omitempty"`
	}
	responseFormat struct {
		Type       string     `json:"type"` // json_schema
		JSONSchema jsonSchema `json:"json_schema"`
	}
	jsonSchema struct {
		Name   string          `json:"name"`
		Strict bool            `json:"strict"`
		Schema json.RawMessage `json:"schema"`
	}
	chatMessage struct {
		Role string `json:"role"`
		// Content is a string, or null for an assistant turn of tool calls.
		Content    *string        `json:"content"`
		ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	chatTool struct {
		Type     string       `json:"type"` // function
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	chatToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"` // function
		Function struct {
			Name string `json:"name"`
			// Arguments is a JSON object in a string.
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatResponse struct {
		Choices []struct {
			FinishReason string      `json:"finish_reason"`
			Message      chatMessage `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	chatError struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
)

// chatBody is the request body of req.
func chatBody(req Request) chatRequest {
	str := func(s string) *string { return &s }
	body := chatRequest{Model: req.Model, Temperature: req.Temperature, MaxTokens: req.MaxTokens,
		Messages: []chatMessage{{Role: "system", Content: str(req.System)}}}
	for _, m := range req.messages() {
		switch m.Role {
		case RoleAssistant:
			cm := chatMessage{Role: "assistant"}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				cm.Content = str(m.Text)
			}
			for _, c := range m.ToolCalls {
				tc := chatToolCall{ID: c.ID, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = c.Name, string(c.Input)
				cm.ToolCalls = append(cm.ToolCalls, tc)
			}
			body.Messages = append(body.Messages, cm)
		default:
			// Results come first: they answer the assistant's last turn.
			for _, r := range m.ToolResults {
				text := r.Text
				if r.IsError {
					text = "ERROR: " + text
				}
				body.Messages = append(body.Messages, chatMessage{Role: "tool", ToolCallID: r.CallID, Content: str(text)})
			}
			if m.Text != "" || len(m.ToolResults) == 0 {
				body.Messages = append(body.Messages, chatMessage{Role: "user", Content: str(m.Text)})
			}
		}
	}
	if len(req.AnswerSchema) > 0 {
		body.ResponseFormat = &responseFormat{Type: "json_schema",
			JSONSchema: jsonSchema{Name: "root_cause_report", Strict: true, Schema: req.AnswerSchema}}
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, chatTool{Type: "function",
			Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.Schema}})
	}
	return body
}

// maxErrorBody bounds the body of an error answer.
const maxErrorBody = 16 << 10

// Complete implements Provider. It sends max_tokens (not
// max_completion_tokens), which every compatible server reads. The body is
// read within ctx and at most envelopeCap(req.MaxAnswerBytes) bytes of it.
func (o *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	fail := func(status int, err error) (Response, error) {
		return Response{}, &Error{Provider: ProviderOpenAI, StatusCode: status, Err: err}
	}
	payload, err := json.Marshal(chatBody(req))
	if err != nil {
		return fail(0, fmt.Errorf("encode request: %w", err))
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(payload))
	if err != nil {
		return fail(0, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if o.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+o.apiKey)
	}
	resp, err := o.hc.Do(hreq)
	if err != nil {
		return fail(0, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		var ce chatError
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &ce) == nil && ce.Error.Message != "" {
			msg = ce.Error.Message
			if ce.Error.Type != "" {
				msg = ce.Error.Type + ": " + msg
			}
		}
		return Response{}, &Error{Provider: ProviderOpenAI, StatusCode: resp.StatusCode,
			RetryAfter: retryAfter(resp.Header.Get("Retry-After")), Err: errors.New(msg)}
	}
	limit := envelopeCap(req.MaxAnswerBytes)
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fail(0, fmt.Errorf("read answer: %w", err))
	}
	if int64(len(b)) > limit {
		return fail(0, fmt.Errorf("%w: the body passed %d bytes", ErrAnswerTooLarge, limit))
	}
	return decodeChat(b)
}

// decodeChat is the Response of a Chat Completions answer body: its text
// and tool calls, its usage checked (checkUsage).
func decodeChat(b []byte) (Response, error) {
	fail := func(err error) (Response, error) {
		return Response{}, &Error{Provider: ProviderOpenAI, Err: err}
	}
	var out chatResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return fail(fmt.Errorf("decode answer: %w", err))
	}
	if err := checkUsage("prompt_tokens", out.Usage.PromptTokens, "completion_tokens", out.Usage.CompletionTokens); err != nil {
		return fail(err)
	}
	r := Response{InputTokens: int(out.Usage.PromptTokens), OutputTokens: int(out.Usage.CompletionTokens)}
	if len(out.Choices) == 0 {
		return r, &Error{Provider: ProviderOpenAI, Err: fmt.Errorf("%w (no choices)", ErrEmpty)}
	}
	c := out.Choices[0]
	if c.Message.Content != nil {
		r.Text = *c.Message.Content
	}
	r.FinishReason = c.FinishReason
	r.Truncated = c.FinishReason == "length"
	for _, tc := range c.Message.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage(tc.Function.Arguments)})
	}
	if strings.TrimSpace(r.Text) == "" && len(r.ToolCalls) == 0 {
		return r, &Error{Provider: ProviderOpenAI, Err: fmt.Errorf("%w (finish reason %q)", ErrEmpty, c.FinishReason)}
	}
	return r, nil
}
