package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/prometheus/client_golang/prometheus"
)

// cannedAnswer is a transport that answers every request with one status,
// Retry-After and body, without a network.
type cannedAnswer struct {
	status     int
	retryAfter string
	body       []byte
}

func (c cannedAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if c.retryAfter != "" {
		h.Set("Retry-After", c.retryAfter)
	}
	return &http.Response{StatusCode: c.status, Header: h, Body: io.NopCloser(bytes.NewReader(c.body)),
		ContentLength: int64(len(c.body)), Request: r}, nil
}

func cannedOpenAI(a cannedAnswer) Provider {
	return NewOpenAI("http://model.invalid/v1", "sk-test", &http.Client{Transport: a})
}

func cannedBedrock(a cannedAnswer) Provider {
	return NewBedrock(awsConfig(), Guardrail{}, func(o *bedrockruntime.Options) {
		o.BaseEndpoint = aws.String("http://bedrock.invalid")
		o.HTTPClient = &http.Client{Transport: a}
	})
}

// checkAnswer holds for every answer a provider can decode, whatever the
// endpoint sent: token counts within [0, MaxUsageTokens], a Retry-After
// within [0, maxRetryAfter], and the Result built from it counted and
// stored as JSON without a panic.
func checkAnswer(t *testing.T, p Provider) {
	t.Helper()
	req := Request{Model: testModel, System: "s", User: "u", MaxTokens: 100, MaxAnswerBytes: 4 << 10}
	resp, err := p.Complete(context.Background(), req)
	for _, n := range []int{resp.InputTokens, resp.OutputTokens} {
		if n < 0 || n > MaxUsageTokens {
			t.Fatalf("token count %d escaped the check (err %v)", n, err)
		}
	}
	var pe *Error
	if errors.As(err, &pe) && (pe.RetryAfter < 0 || pe.RetryAfter > maxRetryAfter) {
		t.Fatalf("Retry-After %s escaped the cap", pe.RetryAfter)
	}
	// A deadline shorter than any backoff: a retryable answer is not
	// asked again.
	gctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	res := NewGenerator(testConfig(), staticProvider{resp, err}, nil, nil).Generate(gctx, Evidence{})
	m, merr := newMetrics(prometheus.NewRegistry())
	if merr != nil {
		t.Fatal(merr)
	}
	m.observe(p.Name(), res)
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("the result cannot be stored: %v", err)
	}
}

// staticProvider answers every request with one Response and error.
type staticProvider struct {
	resp Response
	err  error
}

func (staticProvider) Name() string { return "static" }
func (s staticProvider) Complete(context.Context, Request) (Response, error) {
	return s.resp, s.err
}

// openAISeeds are answers of an OpenAI-compatible endpoint, hostile and
// broken ones included; `go test` runs them as the fuzz target's seeds.
var openAISeeds = []string{
	`{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"Root cause: disk full"}}],"usage":{"prompt_tokens":10,"completion_tokens":5}}`,
	`{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":-1000,"completion_tokens":5}}`,
	`{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":10,"completion_tokens":-5}}`,
	`{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807}}`,
	`{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":1e308}}`,
	`{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":NaN}}`,
	`{"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"df","arguments":"{\"mount\":\"/\"}"}}]}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"choices":[],"usage":{"prompt_tokens":-1}}`,
	`{"error":{"message":"slow down","type":"rate_limit"}}`,
	`not json`,
	``,
}

// bedrockSeeds are Converse answers, hostile and broken ones included.
var bedrockSeeds = []string{
	`{"output":{"message":{"role":"assistant","content":[{"text":"Root cause: disk full"}]}},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15},"metrics":{"latencyMs":1}}`,
	`{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":-1000,"outputTokens":5,"totalTokens":-995},"metrics":{"latencyMs":1}}`,
	`{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":-2147483648,"totalTokens":0},"metrics":{"latencyMs":1}}`,
	`{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":2147483647,"outputTokens":2147483647,"totalTokens":-2},"metrics":{"latencyMs":1}}`,
	`{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"df","input":{"mount":"/"}}}]}},"stopReason":"tool_use","usage":{"inputTokens":1,"outputTokens":1,"totalTokens":2},"metrics":{"latencyMs":1}}`,
	`{"output":{"message":{"role":"assistant","content":[]}},"stopReason":"max_tokens"}`,
	`{"output":{"unknownMember":{}},"usage":{"inputTokens":-1}}`,
	`{"message":"Too many requests"}`,
	`not json`,
	``,
}

// fuzzStatuses maps a fuzzed byte to the statuses a provider answers with.
var fuzzStatuses = []int{200, 200, 200, 429, 500, 503, 400}

func FuzzOpenAIAnswer(f *testing.F) {
	for i, s := range openAISeeds {
		f.Add(uint8(i%len(fuzzStatuses)), "", []byte(s))
	}
	f.Add(uint8(3), "9223372037", []byte(openAISeeds[8]))
	f.Add(uint8(3), "-5", []byte(openAISeeds[8]))
	f.Fuzz(func(t *testing.T, status uint8, retryAfter string, body []byte) {
		checkAnswer(t, cannedOpenAI(cannedAnswer{fuzzStatuses[int(status)%len(fuzzStatuses)], retryAfter, body}))
	})
}

func FuzzBedrockAnswer(f *testing.F) {
	for i, s := range bedrockSeeds {
		f.Add(uint8(i%len(fuzzStatuses)), "", []byte(s))
	}
	f.Add(uint8(3), "99999999999999999999", []byte(bedrockSeeds[7]))
	f.Fuzz(func(t *testing.T, status uint8, retryAfter string, body []byte) {
		checkAnswer(t, cannedBedrock(cannedAnswer{fuzzStatuses[int(status)%len(fuzzStatuses)], retryAfter, body}))
	})
}

// An answer with token counts below zero (or past MaxUsageTokens) is
// refused as invalid_answer, whichever provider sent it, and the report
// that asked ends failed with that reason instead of panicking the
// agent at the token counter.
func TestProviderRefusesImpossibleUsage(t *testing.T) {
	tests := []struct {
		name string
		p    Provider
	}{
		{"openai negative prompt_tokens", cannedOpenAI(cannedAnswer{status: 200, body: []byte(openAISeeds[1])})},
		{"openai negative completion_tokens", cannedOpenAI(cannedAnswer{status: 200, body: []byte(openAISeeds[2])})},
		{"openai huge counts", cannedOpenAI(cannedAnswer{status: 200, body: []byte(openAISeeds[3])})},
		{"bedrock negative inputTokens", cannedBedrock(cannedAnswer{status: 200, body: []byte(bedrockSeeds[1])})},
		{"bedrock negative outputTokens", cannedBedrock(cannedAnswer{status: 200, body: []byte(bedrockSeeds[2])})},
		{"bedrock huge counts", cannedBedrock(cannedAnswer{status: 200, body: []byte(bedrockSeeds[3])})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.p.Complete(context.Background(), Request{Model: testModel, System: "s", User: "u", MaxTokens: 10})
			if !errors.Is(err, ErrInvalidAnswer) {
				t.Fatalf("got %v, want %v", err, ErrInvalidAnswer)
			}
			sink := newSink()
			r, err := New(Options{Config: testConfig(), Provider: tt.p, Queue: NewMemoryQueue(0, nil), Sink: sink,
				Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			r.handle(Claimed{Job: Job{ID: "t1"}, Attempt: 1})
			res := sink.next(t, time.Second)
			if res.Status != StatusFailed || !bytes.Contains([]byte(res.Reason), []byte(ErrInvalidAnswer.Error())) {
				t.Fatalf("result %s %q, want failed with %s", res.Status, res.Reason, ErrInvalidAnswer)
			}
			if res.InputTokens != 0 || res.OutputTokens != 0 {
				t.Fatalf("the impossible counts reached the result: %d, %d", res.InputTokens, res.OutputTokens)
			}
		})
	}
}

// Retry-After is read in seconds within [0, maxRetryAfter]: a number that
// overflows a time.Duration is the cap, never a negative or tiny wait.
func TestRetryAfterIsBounded(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"7", 7 * time.Second}, {" 7 ", 7 * time.Second}, {"-5", 0}, {"0", 0},
		{"Wed, 21 Oct 2015 07:28:00 GMT", 0},
		{"3601", maxRetryAfter},
		{"9223372037", maxRetryAfter},
		{"18446744074", maxRetryAfter},
		{"99999999999999999999", maxRetryAfter},
		{"-99999999999999999999", 0},
		{strconv.Itoa(int(maxRetryAfter / time.Second)), maxRetryAfter},
	} {
		if got := retryAfter(tt.in); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
