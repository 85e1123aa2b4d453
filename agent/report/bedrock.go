package report

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
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
	return &Bedrock{c: bedrockruntime.NewFromConfig(awsCfg, opts...), guardrail: g}
}

// Name implements Provider.
func (*Bedrock) Name() string { return ProviderBedrock }

// Complete implements Provider.
func (b *Bedrock) Complete(ctx context.Context, req Request) (Response, error) {
	in := &bedrockruntime.ConverseInput{
		ModelId: aws.String(req.Model),
		System:  []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: req.System}},
		Messages: []types.Message{{
			Role:    types.ConversationRoleUser,
			Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: req.User}},
		}},
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
	out, err := b.c.Converse(ctx, in)
	if err != nil {
		e := &Error{Provider: ProviderBedrock, Err: err}
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			e.StatusCode = re.HTTPStatusCode()
			if re.Response != nil {
				e.RetryAfter = retryAfter(re.Response.Header.Get("Retry-After"))
			}
		}
		return Response{}, e
	}
	r := Response{FinishReason: string(out.StopReason), Truncated: out.StopReason == types.StopReasonMaxTokens}
	if u := out.Usage; u != nil {
		r.InputTokens = int(aws.ToInt32(u.InputTokens))
		r.OutputTokens = int(aws.ToInt32(u.OutputTokens))
	}
	if m, ok := out.Output.(*types.ConverseOutputMemberMessage); ok {
		var sb strings.Builder
		for _, c := range m.Value.Content {
			if t, ok := c.(*types.ContentBlockMemberText); ok {
				sb.WriteString(t.Value)
			}
		}
		r.Text = sb.String()
	}
	if strings.TrimSpace(r.Text) == "" {
		return r, &Error{Provider: ProviderBedrock, Err: fmt.Errorf("%w (stop reason %q)", ErrEmpty, out.StopReason)}
	}
	return r, nil
}

// retryAfter reads a Retry-After header in seconds; 0 when absent or a date.
func retryAfter(h string) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}
