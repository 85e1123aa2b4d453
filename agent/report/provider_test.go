package report

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/autodiag/autodiag/internal/fake/bedrockfake"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
)

const testModel = "amazon.nova-lite-v1:0"

func awsConfig() aws.Config {
	return aws.Config{Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "secretfake", "")}
}

func newBedrockFake(t *testing.T) (*bedrockfake.Server, *Bedrock) {
	t.Helper()
	f := bedrockfake.New(testModel)
	t.Cleanup(f.Close)
	return f, NewBedrock(awsConfig(), Guardrail{}, func(o *bedrockruntime.Options) { o.BaseEndpoint = aws.String(f.URL) })
}

func newOpenAIFake(t *testing.T) (*openaifake.Server, *OpenAI) {
	t.Helper()
	f := openaifake.New()
	t.Cleanup(f.Close)
	return f, NewOpenAI(f.BaseURL(), "sk-test-key", &http.Client{})
}

// fault is one fake behaviour, for both fakes.
type fault struct {
	bedrock bedrockfake.Fault
	openai  openaifake.Fault
}

var (
	fThrottle = fault{bedrockfake.Throttle, openaifake.Throttle}
	f500      = fault{bedrockfake.ServerErr, openaifake.ServerErr}
	fLength   = fault{bedrockfake.MaxTokens, openaifake.Length}
	fEmpty    = fault{bedrockfake.Empty, openaifake.Empty}
	fGarbage  = fault{bedrockfake.Garbage, openaifake.Garbage}
	fNoModel  = fault{bedrockfake.UnknownModel, openaifake.UnknownModel}
)

// fakeProvider is a provider and the controls of its fake.
type fakeProvider struct {
	p        Provider
	script   func(...fault)
	always   func(fault)
	latency  func(time.Duration)
	requests func() [][]byte
	// toolCall queues an answer asking for one tool; huge makes every
	// answer a streamed text of n bytes; reply sets the answer text.
	toolCall func(id, name, input string)
	huge     func(n int64)
	reply    func(string)
}

func providers(t *testing.T) map[string]func(t *testing.T) fakeProvider {
	return map[string]func(t *testing.T) fakeProvider{
		ProviderBedrock: func(t *testing.T) fakeProvider {
			f, p := newBedrockFake(t)
			return fakeProvider{p: p,
				script: func(fs ...fault) {
					for _, x := range fs {
						f.Script(x.bedrock)
					}
				},
				always:  func(x fault) { f.Always(x.bedrock) },
				latency: f.SetLatency,
				toolCall: func(id, name, input string) {
					f.Queue(bedrockfake.Reply{ToolUses: []bedrockfake.ToolUse{{ID: id, Name: name, Input: input}}})
				},
				huge:  func(n int64) { f.SetHugeBytes(n); f.Always(bedrockfake.Huge) },
				reply: f.SetReply,
				requests: func() (out [][]byte) {
					for _, r := range f.Requests() {
						out = append(out, r.Body)
					}
					return out
				}}
		},
		ProviderOpenAI: func(t *testing.T) fakeProvider {
			f, p := newOpenAIFake(t)
			return fakeProvider{p: p,
				script: func(fs ...fault) {
					for _, x := range fs {
						f.Script(x.openai)
					}
				},
				always:  func(x fault) { f.Always(x.openai) },
				latency: f.SetLatency,
				toolCall: func(id, name, input string) {
					f.Queue(openaifake.Reply{ToolCalls: []openaifake.ToolCall{{ID: id, Name: name, Arguments: input}}})
				},
				huge:  func(n int64) { f.SetHugeBytes(n); f.Always(openaifake.Huge) },
				reply: f.SetReply,
				requests: func() (out [][]byte) {
					for _, r := range f.Requests() {
						out = append(out, r.Body)
					}
					return out
				}}
		},
	}
}

func TestProviderAnswers(t *testing.T) {
	for name, mk := range providers(t) {
		t.Run(name, func(t *testing.T) {
			fp := mk(t)
			r, err := fp.p.Complete(context.Background(), Request{Model: testModel, System: "sys", User: "user", Temperature: 0.2, MaxTokens: 1024})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(r.Text, "## Root cause") || r.InputTokens == 0 || r.OutputTokens == 0 || r.Truncated {
				t.Fatalf("response %+v", r)
			}
			body := string(fp.requests()[0])
			for _, want := range []string{"0.2", "1024", "sys", "user"} {
				if !strings.Contains(body, want) {
					t.Errorf("request body lacks %q: %s", want, body)
				}
			}
		})
	}
}

func TestBedrockGuardrailAndModelIDInPath(t *testing.T) {
	f := bedrockfake.New(testModel)
	defer f.Close()
	p := NewBedrock(awsConfig(), Guardrail{ID: "gr-1", Version: "3"}, func(o *bedrockruntime.Options) { o.BaseEndpoint = aws.String(f.URL) })
	if _, err := p.Complete(context.Background(), Request{Model: testModel, System: "s", User: "u", MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	r := f.Requests()[0]
	if r.ModelID != testModel || !strings.Contains(string(r.Body), `"guardrailIdentifier":"gr-1"`) || !strings.Contains(string(r.Body), `"guardrailVersion":"3"`) {
		t.Fatalf("request %s %s", r.ModelID, r.Body)
	}
	_, err := p.Complete(context.Background(), Request{Model: "no.such-model", System: "s", User: "u", MaxTokens: 10})
	var pe *Error
	if err == nil || !asError(err, &pe) || pe.StatusCode != 400 || pe.Retryable() {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestBedrockEndpointFromEnvironment checks that the loader the program
// uses points the client at AWS_ENDPOINT_URL_BEDROCK_RUNTIME.
func TestBedrockEndpointFromEnvironment(t *testing.T) {
	f := bedrockfake.New(testModel)
	defer f.Close()
	t.Setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", f.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secretfake")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewBedrock(cfg, Guardrail{}).Complete(context.Background(), Request{Model: testModel, System: "s", User: "u", MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if len(f.Requests()) != 1 {
		t.Fatal("the fake got no request")
	}
}

func TestOpenAISendsKey(t *testing.T) {
	f, p := newOpenAIFake(t)
	if _, err := p.Complete(context.Background(), Request{Model: "m", System: "s", User: "u", MaxTokens: 5}); err != nil {
		t.Fatal(err)
	}
	if got := f.Requests()[0].Authorization; got != "Bearer sk-test-key" {
		t.Fatalf("Authorization %q", got)
	}
}

// TestProviderToolRoundTrip: both providers offer tools, read a tool call,
// and send its result back in a shape their fake (checked against the
// API's rules) accepts.
func TestProviderToolRoundTrip(t *testing.T) {
	for name, mk := range providers(t) {
		t.Run(name, func(t *testing.T) {
			fp := mk(t)
			tools := []Tool{{Name: "disk_usage", Description: "df -h",
				Schema: []byte(`{"type":"object","properties":{"path":{"type":"string","pattern":"^/[a-z/]*$"}},"required":["path"]}`)}}
			fp.toolCall("call-1", "disk_usage", `{"path":"/var"}`)
			msgs := []Message{{Role: RoleUser, Text: "disk full on web-3"}}
			r, err := fp.p.Complete(context.Background(), Request{Model: testModel, System: "s", Messages: msgs, MaxTokens: 100, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "call-1" || r.ToolCalls[0].Name != "disk_usage" {
				t.Fatalf("tool calls %+v", r.ToolCalls)
			}
			var in map[string]string
			if err := json.Unmarshal(r.ToolCalls[0].Input, &in); err != nil || in["path"] != "/var" {
				t.Fatalf("input %s: %v", r.ToolCalls[0].Input, err)
			}
			if body := string(fp.requests()[0]); !strings.Contains(body, "disk_usage") || !strings.Contains(body, `^/[a-z/]*$`) {
				t.Fatalf("tools not offered: %s", body)
			}
			msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: r.ToolCalls},
				Message{Role: RoleUser, ToolResults: []ToolResult{{CallID: "call-1", Text: "/dev/xvda1 100% /var"}}})
			r, err = fp.p.Complete(context.Background(), Request{Model: testModel, System: "s", Messages: msgs, MaxTokens: 100, Tools: tools})
			if err != nil || !strings.Contains(r.Text, "## Root cause") {
				t.Fatalf("after the tool result: %+v %v", r, err)
			}
			if body := string(fp.requests()[1]); !strings.Contains(body, "/dev/xvda1 100% /var") || !strings.Contains(body, "call-1") {
				t.Fatalf("tool result not sent: %s", body)
			}
		})
	}
}

// TestProviderHugeAnswerBounded: a hostile endpoint streaming 100 MB is
// read no further than the envelope of MaxAnswerBytes, and ends
// ErrAnswerTooLarge, not retryable.
func TestProviderHugeAnswerBounded(t *testing.T) {
	for name, mk := range providers(t) {
		t.Run(name, func(t *testing.T) {
			fp := mk(t)
			fp.huge(100 << 20)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := fp.p.Complete(context.Background(), Request{Model: testModel, System: "s", User: "u", MaxTokens: 10, MaxAnswerBytes: 64 << 10})
			runtime.ReadMemStats(&after)
			var pe *Error
			if !errors.Is(err, ErrAnswerTooLarge) || !errors.As(err, &pe) || pe.Retryable() {
				t.Fatalf("err %v", err)
			}
			// TotalAlloc counts every byte allocated during the call: far
			// below the 100 MB answer, within a few times the envelope.
			if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(8*envelopeCap(64<<10)); got > limit {
				t.Fatalf("allocated %d bytes reading the answer, want < %d", got, limit)
			}
		})
	}
}

// TestGenerateCutsLongAnswer: an answer past max_answer_bytes but within
// its envelope is cut at a rune boundary and marked; one far past it ends
// failed with answer_too_large.
func TestGenerateCutsLongAnswer(t *testing.T) {
	for name, mk := range providers(t) {
		t.Run(name, func(t *testing.T) {
			fp := mk(t)
			cfg := testConfig()
			cfg.MaxAnswerBytes = 1 << 10
			fp.reply(strings.Repeat("é", 1000)) // 2,000 bytes of 2-byte runes
			res := NewGenerator(cfg, fp.p, nil, nil).Generate(context.Background(), evidence())
			if res.Status != StatusOK || !res.AnswerCut || len(res.Markdown) > 1<<10 ||
				!strings.HasSuffix(res.Markdown, AnswerCutMark) || !utf8.ValidString(res.Markdown) {
				t.Fatalf("cut answer: status %s cut %v len %d valid %v", res.Status, res.AnswerCut, len(res.Markdown), utf8.ValidString(res.Markdown))
			}
			fp.huge(10 << 20)
			start := time.Now()
			res = NewGenerator(cfg, fp.p, nil, nil).Generate(context.Background(), evidence())
			if res.Status != StatusFailed || !strings.HasPrefix(res.Reason, "answer_too_large") || res.Attempts != 1 {
				t.Fatalf("huge answer: %+v", res)
			}
			if d := time.Since(start); d > cfg.Timeout {
				t.Fatalf("huge answer took %s, past report.timeout %s", d, cfg.Timeout)
			}
		})
	}
}
