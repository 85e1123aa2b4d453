package report

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/autodiag/autodiag/internal/bedrockfake"
	"github.com/autodiag/autodiag/internal/openaifake"
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
