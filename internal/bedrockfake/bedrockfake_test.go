package bedrockfake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/autodiag/autodiag/internal/bedrockfake"
)

const model = "amazon.nova-lite-v1:0"

// TestFaultsThroughTheSDK drives every fault with the real bedrockruntime
// client.
func TestFaultsThroughTheSDK(t *testing.T) {
	f := bedrockfake.New(model)
	defer f.Close()
	c := bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "s", ""), RetryMaxAttempts: 1})
	ask := func(ctx context.Context, id string) (*bedrockruntime.ConverseOutput, error) {
		return c.Converse(ctx, &bedrockruntime.ConverseInput{ModelId: aws.String(id),
			Messages:        []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hi"}}}},
			InferenceConfig: &types.InferenceConfiguration{MaxTokens: aws.Int32(5)}})
	}
	cases := []struct {
		fault  bedrockfake.Fault
		status int
		stop   types.StopReason
		text   bool
		err    bool
	}{
		{fault: bedrockfake.OK, stop: types.StopReasonEndTurn, text: true},
		{fault: bedrockfake.Throttle, status: 429},
		{fault: bedrockfake.ServerErr, status: 500},
		{fault: bedrockfake.UnknownModel, status: 400},
		{fault: bedrockfake.MaxTokens, stop: types.StopReasonMaxTokens, text: true},
		{fault: bedrockfake.Empty, stop: types.StopReasonEndTurn},
		{fault: bedrockfake.Garbage, err: true},
	}
	for _, tc := range cases {
		f.Script(tc.fault)
		out, err := ask(context.Background(), model)
		var re *awshttp.ResponseError
		switch {
		case tc.status != 0:
			if !errors.As(err, &re) || re.HTTPStatusCode() != tc.status {
				t.Errorf("fault %d: err %v, want status %d", tc.fault, err, tc.status)
			}
		case tc.err:
			if err == nil {
				t.Errorf("fault %d: no error", tc.fault)
			}
		default:
			if err != nil {
				t.Errorf("fault %d: %v", tc.fault, err)
				continue
			}
			m := out.Output.(*types.ConverseOutputMemberMessage)
			if out.StopReason != tc.stop || (len(m.Value.Content) > 0) != tc.text || aws.ToInt32(out.Usage.InputTokens) == 0 {
				t.Errorf("fault %d: %+v", tc.fault, out)
			}
		}
	}
	var tt *types.ThrottlingException
	f.Script(bedrockfake.Throttle)
	if _, err := ask(context.Background(), model); !errors.As(err, &tt) {
		t.Errorf("throttle is not a ThrottlingException: %v", err)
	}
	var ve *types.ValidationException
	if _, err := ask(context.Background(), "no.such-model"); !errors.As(err, &ve) {
		t.Errorf("unknown model: %v", err)
	}
	if r := f.Requests(); len(r) != len(cases)+2 || r[0].ModelID != model {
		t.Fatalf("recorded %+v", r)
	}
	f.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ask(ctx, model); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow answer: %v", err)
	}
}
