package openaifake_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/autodiag/autodiag/internal/openaifake"
)

// TestFaultsThroughTheSDK drives every fault with the real openai-go client.
func TestFaultsThroughTheSDK(t *testing.T) {
	f := openaifake.New()
	defer f.Close()
	c := openai.NewClient(option.WithBaseURL(f.BaseURL()), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{}))
	ask := func(ctx context.Context) (*openai.ChatCompletion, error) {
		return c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(5)})
	}
	cases := []struct {
		fault  openaifake.Fault
		status int    // API error status; 0: no API error
		finish string // when answered
		text   bool
		err    bool
	}{
		{fault: openaifake.OK, finish: "stop", text: true},
		{fault: openaifake.Throttle, status: 429},
		{fault: openaifake.ServerErr, status: 500},
		{fault: openaifake.UnknownModel, status: 404},
		{fault: openaifake.Length, finish: "length", text: true},
		{fault: openaifake.Empty, finish: "stop"},
		{fault: openaifake.Garbage, err: true},
	}
	for _, tc := range cases {
		f.Script(tc.fault)
		out, err := ask(context.Background())
		var ae *openai.Error
		switch {
		case tc.status != 0:
			if !errors.As(err, &ae) || ae.StatusCode != tc.status {
				t.Errorf("fault %d: err %v, want status %d", tc.fault, err, tc.status)
			}
		case tc.err:
			if err == nil {
				t.Errorf("fault %d: no error", tc.fault)
			}
		default:
			if err != nil || out.Choices[0].FinishReason != tc.finish || (out.Choices[0].Message.Content != "") != tc.text || out.Usage.PromptTokens == 0 {
				t.Errorf("fault %d: %+v %v", tc.fault, out, err)
			}
		}
	}
	if n := len(f.Requests()); n != len(cases) {
		t.Fatalf("%d requests recorded, want %d", n, len(cases))
	}
	// Latency: the client's deadline ends the wait.
	f.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ask(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow answer: %v", err)
	}
}
