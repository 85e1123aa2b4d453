package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
)

// converseAPI is what Bedrock uses of the bedrockruntime client.
type converseAPI interface {
	Converse(ctx context.Context, in *bedrockruntime.ConverseInput, opts ...func(*bedrockruntime.Options)) (*bedrockruntime.ConverseOutput, error)
}

// Bedrock is the Bedrock Converse provider.
type Bedrock struct {
	c         converseAPI
	guardrail Guardrail
}

var _ Provider = (*Bedrock)(nil)

// NewBedrock returns the Bedrock provider on awsCfg (the instance role's
// credentials; AWS_ENDPOINT_URL_BEDROCK_RUNTIME is honoured by the loader
// of awsCfg). optFns adjust the client, e.g. a BaseEndpoint in tests. The
// SDK's own retries are off: the Generator retries within the timeout.
func NewBedrock(awsCfg aws.Config, g Guardrail, optFns ...func(*bedrockruntime.Options)) *Bedrock {
	opts := append([]func(*bedrockruntime.Options){func(o *bedrockruntime.Options) {
		o.RetryMaxAttempts = 1
	}}, optFns...)
	// Last, so that it wraps whatever client the options ended with.
	opts = append(opts, func(o *bedrockruntime.Options) { o.HTTPClient = cappedClient{o.HTTPClient} })
	return &Bedrock{c: bedrockruntime.NewFromConfig(awsCfg, opts...), guardrail: g}
}

// Name implements Provider.
func (*Bedrock) Name() string { return ProviderBedrock }

// Complete implements Provider.
func (b *Bedrock) Complete(ctx context.Context, req Request) (Response, error) {
	in := &bedrockruntime.ConverseInput{
		ModelId:  aws.String(req.Model),
		System:   []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: req.System}},
		Messages: converseMessages(req.messages()),
		InferenceConfig: &types.InferenceConfiguration{
			MaxTokens:   aws.Int32(int32(req.MaxTokens)),
			Temperature: aws.Float32(float32(req.Temperature)),
		},
	}
	if b.guardrail.ID != "" {
		in.GuardrailConfig = &types.GuardrailConfiguration{
			GuardrailIdentifier: aws.String(b.guardrail.ID),
			GuardrailVersion:    aws.String(b.guardrail.Version),
		}
	}
	if len(req.Tools) > 0 {
		in.ToolConfig = &types.ToolConfiguration{}
		for _, t := range req.Tools {
			var schema any
			if err := json.Unmarshal(t.Schema, &schema); err != nil {
				return Response{}, &Error{Provider: ProviderBedrock, Err: fmt.Errorf("tool %s: schema: %w", t.Name, err)}
			}
			in.ToolConfig.Tools = append(in.ToolConfig.Tools, &types.ToolMemberToolSpec{Value: types.ToolSpecification{
				Name: aws.String(t.Name), Description: aws.String(t.Description),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)},
			}})
		}
	}
	out, err := b.c.Converse(withBodyCap(ctx, envelopeCap(req.MaxAnswerBytes)), in)
	if err != nil {
		e := &Error{Provider: ProviderBedrock, Err: err}
		if errors.Is(err, ErrAnswerTooLarge) {
			e.Err = fmt.Errorf("%w: the body passed %d bytes", ErrAnswerTooLarge, envelopeCap(req.MaxAnswerBytes))
			return Response{}, e
		}
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			e.StatusCode = re.HTTPStatusCode()
			if re.Response != nil {
				e.RetryAfter = retryAfter(re.Response.Header.Get("Retry-After"))
			}
		}
		return Response{}, e
	}
	return converseResponse(out)
}

// converseResponse is the Response of a Converse answer: its text and
// tool calls, its usage checked (checkUsage).
func converseResponse(out *bedrockruntime.ConverseOutput) (Response, error) {
	r := Response{FinishReason: string(out.StopReason), Truncated: out.StopReason == types.StopReasonMaxTokens}
	if u := out.Usage; u != nil {
		in, outT := aws.ToInt32(u.InputTokens), aws.ToInt32(u.OutputTokens)
		if err := checkUsage("inputTokens", int64(in), "outputTokens", int64(outT)); err != nil {
			return Response{}, &Error{Provider: ProviderBedrock, Err: err}
		}
		r.InputTokens, r.OutputTokens = int(in), int(outT)
	}
	if m, ok := out.Output.(*types.ConverseOutputMemberMessage); ok {
		var sb strings.Builder
		for _, c := range m.Value.Content {
			switch c := c.(type) {
			case *types.ContentBlockMemberText:
				sb.WriteString(c.Value)
			case *types.ContentBlockMemberToolUse:
				tc := ToolCall{ID: aws.ToString(c.Value.ToolUseId), Name: aws.ToString(c.Value.Name), Input: json.RawMessage("{}")}
				if c.Value.Input != nil {
					if raw, err := c.Value.Input.MarshalSmithyDocument(); err == nil {
						tc.Input = raw
					}
				}
				r.ToolCalls = append(r.ToolCalls, tc)
			}
		}
		r.Text = sb.String()
	}
	if strings.TrimSpace(r.Text) == "" && len(r.ToolCalls) == 0 {
		return r, &Error{Provider: ProviderBedrock, Err: fmt.Errorf("%w (stop reason %q)", ErrEmpty, out.StopReason)}
	}
	return r, nil
}

// converseMessages is the conversation in Converse's shape: tool calls
// are toolUse blocks of the assistant, results toolResult blocks of the
// user.
func converseMessages(ms []Message) []types.Message {
	var out []types.Message
	for _, m := range ms {
		var content []types.ContentBlock
		for _, r := range m.ToolResults {
			st := types.ToolResultStatusSuccess
			if r.IsError {
				st = types.ToolResultStatusError
			}
			content = append(content, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
				ToolUseId: aws.String(r.CallID), Status: st,
				Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: r.Text}},
			}})
		}
		if m.Text != "" || (len(m.ToolResults) == 0 && len(m.ToolCalls) == 0) {
			content = append(content, &types.ContentBlockMemberText{Value: m.Text})
		}
		for _, c := range m.ToolCalls {
			var input any = map[string]any{}
			if len(c.Input) > 0 {
				var v any
				if json.Unmarshal(c.Input, &v) == nil {
					input = v
				}
			}
			content = append(content, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
				ToolUseId: aws.String(c.ID), Name: aws.String(c.Name), Input: document.NewLazyDocument(input),
			}})
		}
		role := types.ConversationRoleUser
		if m.Role == RoleAssistant {
			role = types.ConversationRoleAssistant
		}
		out = append(out, types.Message{Role: role, Content: content})
	}
	return out
}

// bodyCapKey carries the byte cap of one call's response body.
type bodyCapKey struct{}

func withBodyCap(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, bodyCapKey{}, n)
}

// cappedClient is the SDK's HTTP client with every response body cut at
// the cap its request's context carries: the SDK decodes the body in
// full, and a hostile endpoint must not take the agent's memory.
type cappedClient struct{ inner bedrockruntime.HTTPClient }

func (c cappedClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.inner.Do(r)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	if n, ok := r.Context().Value(bodyCapKey{}).(int64); ok && n > 0 {
		// Read the capped body here, before the SDK sees it: a body past
		// the cap is then a failed call (not retried: MaxAttempts is the
		// generator's), and the SDK's decoder reads bytes in memory, never
		// a connection that a failed read left half consumed.
		body, err := io.ReadAll(&cappedBody{rc: resp.Body, left: n})
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	return resp, nil
}

// cappedBody fails with ErrAnswerTooLarge once more than left bytes came.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrAnswerTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, ErrAnswerTooLarge
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// retryAfter reads a Retry-After header in seconds, at most
// maxRetryAfter; 0 when absent, negative or a date.
func retryAfter(h string) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(strings.TrimSpace(h), "-") {
		return maxRetryAfter
	}
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
}
