package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// OpenAI is the provider of any OpenAI-compatible chat completions server
// (OpenAI, vLLM, Ollama, LiteLLM), through the official Go SDK.
type OpenAI struct {
	c openai.Client
}

var _ Provider = (*OpenAI)(nil)

// NewOpenAI returns the provider on baseURL (e.g. http://vllm:8000/v1)
// with apiKey, the value of report.api_key_env that the program read.
// hc nil means http.DefaultClient. The SDK's own retries are off: the
// Generator retries within the timeout.
func NewOpenAI(baseURL, apiKey string, hc *http.Client) *OpenAI {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &OpenAI{c: openai.NewClient(
		option.WithBaseURL(baseURL),
		option.WithAPIKey(apiKey),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	)}
}

// Name implements Provider.
func (*OpenAI) Name() string { return ProviderOpenAI }

// Complete implements Provider. It sends max_tokens (not
// max_completion_tokens), which every compatible server reads.
func (o *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	out, err := o.c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: req.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(req.System),
			openai.UserMessage(req.User),
		},
		Temperature: openai.Float(req.Temperature),
		MaxTokens:   openai.Int(int64(req.MaxTokens)),
	})
	if err != nil {
		e := &Error{Provider: ProviderOpenAI, Err: err}
		var ae *openai.Error
		if errors.As(err, &ae) {
			e.StatusCode = ae.StatusCode
			if ae.Response != nil {
				e.RetryAfter = retryAfter(ae.Response.Header.Get("Retry-After"))
			}
		}
		return Response{}, e
	}
	r := Response{InputTokens: int(out.Usage.PromptTokens), OutputTokens: int(out.Usage.CompletionTokens)}
	if len(out.Choices) == 0 {
		return r, &Error{Provider: ProviderOpenAI, Err: fmt.Errorf("%w (no choices)", ErrEmpty)}
	}
	c := out.Choices[0]
	r.Text, r.FinishReason = c.Message.Content, c.FinishReason
	r.Truncated = c.FinishReason == "length"
	if strings.TrimSpace(r.Text) == "" {
		return r, &Error{Provider: ProviderOpenAI, Err: fmt.Errorf("%w (finish reason %q)", ErrEmpty, c.FinishReason)}
	}
	return r, nil
}
