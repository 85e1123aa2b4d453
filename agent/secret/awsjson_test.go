package secret

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/internal/awssecretsfake"
)

var requestID = regexp.MustCompile(`RequestID: [^,]*,`)

// outcome is what a caller can see of one Fetch: the value, the error's
// text (request ids aside), its API error and HTTP status.
type outcome struct {
	value, err             string
	code, message          string
	fault                  smithy.ErrorFault
	status                 int
	operationErr, apiError bool
}

func fetchOutcome(ctx context.Context, ref string, c Clients) outcome {
	v, err := Fetch(ctx, ref, c)
	o := outcome{value: v}
	if err == nil {
		return o
	}
	o.err = requestID.ReplaceAllString(err.Error(), "RequestID: ?,")
	var ae smithy.APIError
	if o.apiError = errors.As(err, &ae); o.apiError {
		o.code, o.message, o.fault = ae.ErrorCode(), ae.ErrorMessage(), ae.ErrorFault()
	}
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) {
		o.status = st.HTTPStatusCode()
	}
	var oe *smithy.OperationError
	o.operationErr = errors.As(err, &oe)
	return o
}

// TestClientMatchesSDK runs every reference shape, answer and error the
// fake knows through the package's client and through the real SDK
// client built from the same configuration, and wants the same value or
// the same error (text, API code, message, fault, HTTP status) and the
// same request on the wire.
func TestClientMatchesSDK(t *testing.T) {
	fake, url := startFake(t)
	plain := fake.PutSecretString("autodiag/plain", redisURL)
	inJSON := fake.PutSecretString("autodiag/json", `{"url":"`+redisURL+`"}`)
	binary := fake.PutSecretBinary("autodiag/binary", []byte(redisURL))
	denied := fake.PutSecretString("autodiag/denied", redisURL)
	fake.Deny(denied)
	fake.PutParameter("/autodiag/p", redisURL, true)
	paramARN := fake.PutParameter("/autodiag/by-arn", redisURL, true)
	fake.PutParameter("/autodiag/plain-string", "not secret", false)
	deniedParam := fake.PutParameter("/autodiag/denied", redisURL, true)
	fake.Deny(deniedParam)
	missing := strings.Replace(plain, "autodiag/plain", "autodiag/missing", 1)
	otherRegion := strings.Replace(plain, awssecretsfake.DefaultRegion, "eu-west-1", 1)

	for _, tc := range []struct {
		name, ref, region string
	}{
		{"secret string", plain, awssecretsfake.DefaultRegion},
		{"JSON secret", inJSON, awssecretsfake.DefaultRegion},
		{"secret ARN's region over the client's", plain, "eu-west-1"},
		{"binary secret", binary, awssecretsfake.DefaultRegion},
		{"secret not found", missing, awssecretsfake.DefaultRegion},
		{"secret access denied", denied, awssecretsfake.DefaultRegion},
		{"secret signed for another region", otherRegion, awssecretsfake.DefaultRegion},
		{"SecureString", "/autodiag/p", awssecretsfake.DefaultRegion},
		{"SecureString by ARN", paramARN, "eu-west-1"},
		{"String parameter", "/autodiag/plain-string", awssecretsfake.DefaultRegion},
		{"parameter not found (no message)", "/autodiag/missing", awssecretsfake.DefaultRegion},
		{"parameter access denied", deniedParam, awssecretsfake.DefaultRegion},
		{"parameter signed for another region", "/autodiag/p", "eu-west-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(fake.Calls())
			own := fetchOutcome(t.Context(), tc.ref, testClients(url, tc.region))
			m := len(fake.Calls())
			sdk := fetchOutcome(t.Context(), tc.ref, sdkClients(testConfig(url, tc.region)))
			if own != sdk {
				t.Fatalf("own client:\n  %+v\nSDK client:\n  %+v", own, sdk)
			}
			ownCalls, sdkCalls := fake.Calls()[n:m], fake.Calls()[m:]
			if !slices.Equal(ownCalls, sdkCalls) || len(ownCalls) != 1 {
				t.Fatalf("requests differ:\n  own %+v\n  SDK %+v", ownCalls, sdkCalls)
			}
		})
	}
}

// flaky answers the first n requests with status and an error body, then
// hands the rest to next; it counts every request.
type flaky struct {
	next   http.Handler
	n      int64
	status int
	body   string
	seen   atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.seen.Add(1) <= f.n {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, f.body)
		return
	}
	f.next.ServeHTTP(w, r)
}

// TestRetriesMatchSDK: server faults and throttling are retried up to the
// retryer's attempts, a client fault is not, and an endpoint that keeps
// failing ends in the retryer's max-attempts error — the same number of
// requests and the same error as the SDK client.
func TestRetriesMatchSDK(t *testing.T) {
	fake := awssecretsfake.New()
	arn := fake.PutSecretString("autodiag/s", redisURL)
	fake.PutParameter("/autodiag/p", redisURL, true)
	for _, tc := range []struct {
		name         string
		ref          string
		fail         int64
		status       int
		body         string
		wantRequests int64
		wantValue    bool
		maxAttempts  int // aws.Config.RetryMaxAttempts
	}{
		{"two 500s then the answer", arn, 2, 500, `{"__type":"InternalServiceError","Message":"try again"}`, 3, true, 0},
		{"throttled then the answer", "/autodiag/p", 1, 400, `{"__type":"ThrottlingException","message":"Rate exceeded"}`, 2, true, 0},
		{"503 without a body, always", "/autodiag/p", 100, 503, ``, 3, false, 0},
		{"RetryMaxAttempts applies", arn, 100, 500, `{"__type":"InternalServiceError"}`, 5, false, 5},
		{"a client fault is not retried", arn, 100, 400, `{"__type":"InvalidRequestException","Message":"no"}`, 1, false, 0},
		{"unknown 400 is not retried", "/autodiag/p", 100, 400, `{"__type":"com.amazon.coral#UnrecognizedClientException:http://x","message":"bad token"}`, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]outcome
			config := func(u string) aws.Config {
				cfg := testConfig(u, awssecretsfake.DefaultRegion)
				cfg.RetryMaxAttempts = tc.maxAttempts
				return cfg
			}
			for i, mk := range []func(string) Clients{
				func(u string) Clients { return NewClients(t.Context(), config(u)) },
				func(u string) Clients { return sdkClients(config(u)) },
			} {
				f := &flaky{next: fake, n: tc.fail, status: tc.status, body: tc.body}
				srv := httptest.NewServer(f)
				got[i] = fetchOutcome(t.Context(), tc.ref, mk(srv.URL))
				srv.Close()
				if f.seen.Load() != tc.wantRequests {
					t.Errorf("client %d sent %d requests; want %d", i, f.seen.Load(), tc.wantRequests)
				}
			}
			if (got[0].value == redisURL) != tc.wantValue {
				t.Fatalf("own client: %+v; want value %v", got[0], tc.wantValue)
			}
			if got[0] != got[1] {
				t.Fatalf("own client:\n  %+v\nSDK client:\n  %+v", got[0], got[1])
			}
		})
	}
}

// TestAnswerBounded: an answer longer than maxAnswer is an error, not
// read to its end.
func TestAnswerBounded(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"SecretString":"`)
		chunk := strings.Repeat("x", 64<<10)
		for i := 0; i < 4*maxAnswer/len(chunk); i++ {
			n, err := io.WriteString(w, chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}`)
	}))
	defer srv.Close()
	_, err := Fetch(t.Context(), "arn:aws:secretsmanager:us-east-1:123456789012:secret:big-AbCdEf", testClients(srv.URL, "us-east-1"))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than %d bytes", maxAnswer)) {
		t.Fatalf("Fetch of an endless answer = %v; want the bound named", err)
	}
}

// TestSignatureValid checks the request's SigV4 signature by signing the
// received request again with the same key and time, and that temporary
// credentials send their session token.
func TestSignatureValid(t *testing.T) {
	fake := awssecretsfake.New()
	fake.PutParameter("/autodiag/p", redisURL, true)
	creds := aws.Credentials{AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI", SessionToken: "session-token"}
	var mu sync.Mutex
	var problems []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		problems = append(problems, checkSignature(r.Context(), r, body, creds)...)
		mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL, awssecretsfake.DefaultRegion)
	cfg.Credentials = credentials.StaticCredentialsProvider{Value: creds}
	if got, err := Fetch(t.Context(), "/autodiag/p", NewClients(t.Context(), cfg)); err != nil || got != redisURL {
		t.Fatalf("Fetch = %q, %v", got, err)
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "; "))
	}
}

func checkSignature(ctx context.Context, r *http.Request, body []byte, creds aws.Credentials) []string {
	var problems []string
	if r.Header.Get("X-Amz-Security-Token") != creds.SessionToken {
		problems = append(problems, "no X-Amz-Security-Token")
	}
	auth := r.Header.Get("Authorization")
	m := regexp.MustCompile(`SignedHeaders=([^,]+), Signature=([0-9a-f]+)`).FindStringSubmatch(auth)
	if m == nil {
		return append(problems, "Authorization "+auth+" is not SigV4")
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return append(problems, "X-Amz-Date: "+err.Error())
	}
	again, _ := http.NewRequestWithContext(ctx, r.Method, "http://"+r.Host+r.URL.RequestURI(), strings.NewReader(string(body)))
	for _, h := range strings.Split(m[1], ";") {
		if h != "host" && h != "x-amz-date" && h != "x-amz-security-token" {
			again.Header.Set(h, r.Header.Get(h))
		}
	}
	hash := fmt.Sprintf("%x", sha256.Sum256(body))
	if err := v4.NewSigner().SignHTTP(ctx, creds, again, hash, "ssm", awssecretsfake.DefaultRegion, when); err != nil {
		return append(problems, err.Error())
	}
	if again.Header.Get("Authorization") != auth {
		problems = append(problems, fmt.Sprintf("signature does not verify:\n got  %s\n want %s", auth, again.Header.Get("Authorization")))
	}
	return problems
}

// TestEndpointsMatchSDK holds the regional endpoints to the SDK's
// resolvers, in every partition, with and without FIPS and dual-stack.
func TestEndpointsMatchSDK(t *testing.T) {
	regions := []string{"us-east-1", "eu-west-1", "ap-southeast-2", "cn-north-1", "us-gov-west-1", "us-iso-east-1",
		"us-isob-east-1", "eu-isoe-west-1", "us-isof-south-1", "eusc-de-east-1", "aws-global", "aws-cn-global",
		"aws-us-gov-global", "local-zone-1", "", "bad region"}
	sm, ps := secretsmanager.NewDefaultEndpointResolverV2(), ssm.NewDefaultEndpointResolverV2()
	for _, region := range regions {
		for _, fips := range []bool{false, true} {
			for _, ds := range []bool{false, true} {
				for _, svc := range []service{secretsManagerService, ssmService} {
					c := &jsonClient{svc: svc, dualStack: ds}
					var want string
					var werr error
					if svc.id == ssmService.id {
						e, err := ps.ResolveEndpoint(t.Context(), ssm.EndpointParameters{Region: aws.String(region), UseFIPS: aws.Bool(fips), UseDualStack: aws.Bool(ds)})
						want, werr = e.URI.String(), err
					} else {
						e, err := sm.ResolveEndpoint(t.Context(), secretsmanager.EndpointParameters{Region: aws.String(region), UseFIPS: aws.Bool(fips), UseDualStack: aws.Bool(ds)})
						want, werr = e.URI.String(), err
					}
					if region == "" {
						werr = errors.New("missing region") // the SDK client binds "" as no region
					}
					if region == "bad region" {
						werr = errors.New("invalid region") // rejected by the SDK client before the resolver
					}
					u, err := c.resolve(region, fips)
					switch {
					case (err != nil) != (werr != nil):
						t.Errorf("%s %q fips=%v dualstack=%v: own %v, %v; SDK %s, %v", svc.id, region, fips, ds, u, err, want, werr)
					case err == nil && u.String() != want+"/":
						t.Errorf("%s %q fips=%v dualstack=%v: own %s; SDK %s", svc.id, region, fips, ds, u, want)
					}
				}
			}
		}
	}
}

// TestModeledErrorsMatchSDK: every code the client treats as modeled is
// one of the service's modeled errors with the same fault; for Secrets
// Manager the lists are equal (SSM models ~140 errors for its other
// operations; the client keeps those GetParameter can answer).
func TestModeledErrorsMatchSDK(t *testing.T) {
	for _, tc := range []struct {
		svc   service
		reg   *smithy.TypeRegistry
		equal bool
	}{{secretsManagerService, secretsmanager.TypeRegistry, true}, {ssmService, ssm.TypeRegistry, false}} {
		sdk := map[string]smithy.ErrorFault{}
		for _, e := range tc.reg.Entries {
			if v, ok := e.New().(smithy.APIError); ok {
				sdk[v.ErrorCode()] = v.ErrorFault()
			}
		}
		for code, fault := range tc.svc.modeled {
			if f, ok := sdk[code]; !ok || f != fault {
				t.Errorf("%s %s: fault %v; the SDK models it %v (%v)", tc.svc.id, code, fault, ok, f)
			}
		}
		if tc.equal && len(sdk) != len(tc.svc.modeled) {
			t.Errorf("%s: %d modeled errors; the SDK has %d", tc.svc.id, len(tc.svc.modeled), len(sdk))
		}
	}
}

// TestEndpointOverridesMatchSDK: AWS_ENDPOINT_URL applies to both
// services, AWS_ENDPOINT_URL_<SERVICE> wins for its own, and
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS turns both off (then no custom
// endpoint is used at all: the request fails before it is sent).
func TestEndpointOverridesMatchSDK(t *testing.T) {
	global, own := awssecretsfake.New(), awssecretsfake.New()
	gsrv, osrv := httptest.NewServer(global), httptest.NewServer(own)
	defer gsrv.Close()
	defer osrv.Close()
	for _, f := range []*awssecretsfake.Server{global, own} {
		f.PutParameter("/autodiag/p", redisURL, true)
	}
	arn := global.PutSecretString("autodiag/s", redisURL)
	own.PutSecretString("autodiag/s", redisURL)
	dir := t.TempDir()
	base := map[string]string{
		"AWS_REGION": awssecretsfake.DefaultRegion, "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1",
	}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantOwn    []string // targets the service-specific fake must see
		wantGlobal []string
	}{
		{"global only", map[string]string{"AWS_ENDPOINT_URL": gsrv.URL}, nil,
			[]string{awssecretsfake.TargetGetSecretValue, awssecretsfake.TargetGetParameter}},
		{"SSM's own wins for SSM", map[string]string{"AWS_ENDPOINT_URL": gsrv.URL, "AWS_ENDPOINT_URL_SSM": osrv.URL},
			[]string{awssecretsfake.TargetGetParameter}, []string{awssecretsfake.TargetGetSecretValue}},
		{"Secrets Manager's own wins for it", map[string]string{"AWS_ENDPOINT_URL": gsrv.URL, "AWS_ENDPOINT_URL_SECRETS_MANAGER": osrv.URL},
			[]string{awssecretsfake.TargetGetSecretValue}, []string{awssecretsfake.TargetGetParameter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range base {
				t.Setenv(k, v)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, err := awsconfig.LoadDefaultConfig(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []struct {
				name string
				c    Clients
			}{{"own", NewClients(t.Context(), cfg)}, {"sdk", sdkClients(cfg)}} {
				g0, o0 := len(global.Calls()), len(own.Calls())
				for _, ref := range []string{arn, "/autodiag/p"} {
					if got, err := Fetch(t.Context(), ref, kind.c); err != nil || got != redisURL {
						t.Fatalf("%s: Fetch(%s) = %q, %v", kind.name, ref, got, err)
					}
				}
				if g, o := targets(global.Calls()[g0:]), targets(own.Calls()[o0:]); !slices.Equal(g, tc.wantGlobal) || !slices.Equal(o, tc.wantOwn) {
					t.Errorf("%s: global endpoint saw %v, service endpoint %v; want %v, %v", kind.name, g, o, tc.wantGlobal, tc.wantOwn)
				}
			}
		})
	}
}

func targets(calls []awssecretsfake.Call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Target)
	}
	return out
}

// TestAnonymousMatchesSDK: with aws.AnonymousCredentials both clients send
// the request unsigned (the fake refuses it as AWS would).
func TestAnonymousMatchesSDK(t *testing.T) {
	fake, url := startFake(t)
	fake.PutParameter("/autodiag/p", redisURL, true)
	cfg := testConfig(url, awssecretsfake.DefaultRegion)
	cfg.Credentials = aws.AnonymousCredentials{}
	own := fetchOutcome(t.Context(), "/autodiag/p", NewClients(t.Context(), cfg))
	sdk := fetchOutcome(t.Context(), "/autodiag/p", sdkClients(cfg))
	if own != sdk || own.code != "MissingAuthenticationTokenException" {
		t.Fatalf("own client:\n  %+v\nSDK client:\n  %+v\nwant both MissingAuthenticationTokenException", own, sdk)
	}
}

// skewedServer is a service whose clock runs ahead of the host's by
// ahead: its answers' Date says so, and it refuses a request signed more
// than 5 minutes off its clock, as AWS does.
type skewedServer struct {
	next  http.Handler
	ahead time.Duration
	seen  atomic.Int64
}

func (s *skewedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.seen.Add(1)
	now := time.Now().Add(s.ahead).UTC()
	w.Header().Set("Date", now.Format(http.TimeFormat))
	signed, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || signed.Sub(now) > 5*time.Minute || now.Sub(signed) > 5*time.Minute {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"__type":"InvalidSignatureException","message":"Signature expired: %s is now earlier than %s"}`,
			r.Header.Get("X-Amz-Date"), now.Add(-5*time.Minute).Format("20060102T150405Z"))
		return
	}
	s.next.ServeHTTP(w, r)
}

// TestClockSkewMatchesSDK: against a service whose clock is an hour
// ahead, the first call is refused, retried signed with the offset the
// answer's Date shows, and succeeds; the next call of the same client
// signs right at once; with DisableClockSkewCorrection the call fails.
// The SDK client sends the same requests and ends the same way.
func TestClockSkewMatchesSDK(t *testing.T) {
	fake := awssecretsfake.New()
	arn := fake.PutSecretString("autodiag/s", redisURL)
	fake.PutParameter("/autodiag/p", redisURL, true)
	for _, disabled := range []bool{false, true} {
		var got [2][]any
		for i, mk := range []func(aws.Config) Clients{
			func(cfg aws.Config) Clients { return NewClients(t.Context(), cfg) },
			sdkClients,
		} {
			srv := &skewedServer{next: fake, ahead: time.Hour}
			hs := httptest.NewServer(srv)
			cfg := testConfig(hs.URL, awssecretsfake.DefaultRegion)
			cfg.DisableClockSkewCorrection = disabled
			c := mk(cfg)
			for _, ref := range []string{"/autodiag/p", "/autodiag/p", arn} {
				before := srv.seen.Load()
				o := fetchOutcome(t.Context(), ref, c)
				got[i] = append(got[i], o, srv.seen.Load()-before)
			}
			hs.Close()
		}
		if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
			t.Fatalf("disabled=%v:\n own %+v\n SDK %+v", disabled, got[0], got[1])
		}
		first := got[0][0].(outcome)
		if ok := first.value == redisURL; ok == disabled || got[0][1] != int64(map[bool]int{false: 2, true: 1}[disabled]) {
			t.Fatalf("disabled=%v: first call %+v after %v requests", disabled, first, got[0][1])
		}
	}
}

// TestCredentialsErrorMatchesSDK: a provider that cannot give credentials
// (an instance without a role) fails both clients the same way, naming
// the cause, without a request.
func TestCredentialsErrorMatchesSDK(t *testing.T) {
	fake, url := startFake(t)
	fake.PutParameter("/autodiag/p", redisURL, true)
	cfg := testConfig(url, awssecretsfake.DefaultRegion)
	cfg.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no EC2 IMDS role found")
	})
	own := fetchOutcome(t.Context(), "/autodiag/p", NewClients(t.Context(), cfg))
	sdk := fetchOutcome(t.Context(), "/autodiag/p", sdkClients(cfg))
	if own != sdk || !strings.Contains(own.err, "no EC2 IMDS role found") || len(fake.Calls()) != 0 {
		t.Fatalf("own client:\n  %+v\nSDK client:\n  %+v\n%d requests", own, sdk, len(fake.Calls()))
	}
}
