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
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/autodiag/autodiag/internal/fake/bedrockfake"
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

// TestToolUseThroughTheSDK: the real client sends a toolConfig, reads a
// scripted toolUse, and its toolResult turn is accepted; a conversation
// that breaks Converse's rules (a toolResult answering no toolUse, two
// user turns in a row) is refused with a ValidationException as Bedrock
// refuses it.
func TestToolUseThroughTheSDK(t *testing.T) {
	f := bedrockfake.New(model)
	defer f.Close()
	c := bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "s", ""), RetryMaxAttempts: 1})
	tools := &types.ToolConfiguration{Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{
		Name: aws.String("top_song"), Description: aws.String("Get the most popular song played on a radio station."),
		InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{
			"type": "object", "properties": map[string]any{"sign": map[string]any{"type": "string"}}, "required": []string{"sign"}})},
	}}}}
	user := types.Message{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "What is the most popular song on WZPZ?"}}}
	f.Queue(bedrockfake.Reply{ToolUses: []bedrockfake.ToolUse{{ID: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", Name: "top_song", Input: `{"sign":"WZPZ"}`}}})
	out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(model), Messages: []types.Message{user}, ToolConfig: tools})
	if err != nil {
		t.Fatal(err)
	}
	m := out.Output.(*types.ConverseOutputMemberMessage).Value
	use, ok := m.Content[0].(*types.ContentBlockMemberToolUse)
	if out.StopReason != types.StopReasonToolUse || !ok || aws.ToString(use.Value.ToolUseId) != "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q" {
		t.Fatalf("answer %+v", out)
	}
	result := types.Message{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
		ToolUseId: use.Value.ToolUseId, Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "Elemental Hotel"}}}}}}
	if _, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(model),
		Messages: []types.Message{user, m, result}, ToolConfig: tools}); err != nil {
		t.Fatalf("the tool result turn: %v", err)
	}
	var ve *types.ValidationException
	orphan := types.Message{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
		ToolUseId: aws.String("tooluse_other"), Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "x"}}}}}}
	for name, msgs := range map[string][]types.Message{"orphan toolResult": {user, m, orphan}, "two user turns": {user, user}} {
		if _, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(model), Messages: msgs, ToolConfig: tools}); !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a ValidationException", name, err)
		}
	}
}
