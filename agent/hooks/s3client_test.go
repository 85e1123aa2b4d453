package hooks

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/agent/config"
)

// wire is an aws.HTTPClient that writes each request as it would go on
// the wire (http.Request.Write: request line, Host, headers, body) and
// reads it back, so a test sees the bytes a server would; it answers
// with the next of answers (200 with no body when they run out).
type wire struct {
	mu      sync.Mutex
	sent    []*http.Request
	bodies  [][]byte
	answers []func(*http.Request) *http.Response
}

func (w *wire) Do(req *http.Request) (*http.Response, error) {
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		return nil, err
	}
	got, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(got.Body)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = append(w.sent, got)
	w.bodies = append(w.bodies, body)
	if len(w.answers) > 0 {
		a := w.answers[0]
		w.answers = w.answers[1:]
		return a(req), nil
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func answer(status int, body string) func(*http.Request) *http.Response {
	return func(req *http.Request) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"X-Amz-Request-Id": {"req-1"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
	}
}

var testCreds = credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")

// noBackoff retries at once: a retry test waits on no timer.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

func testAWSConfig(region string, base *string, httpc aws.HTTPClient, sources ...any) aws.Config {
	return aws.Config{Region: region, BaseEndpoint: base, Credentials: testCreds, HTTPClient: httpc, ConfigSources: sources,
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = noBackoff{} })
		}}
}

// verifySigV4 signs again, with the SDK's signer, the request a server
// received, over the headers its Authorization names and at its
// X-Amz-Date, and reports whether that gives the same Authorization: the
// path, host and headers sent are the ones signed.
func verifySigV4(t *testing.T, got *http.Request, region string) {
	t.Helper()
	auth := got.Header.Get("Authorization")
	i := strings.Index(auth, "SignedHeaders=")
	if i < 0 {
		t.Fatalf("no SignedHeaders in Authorization %q", auth)
	}
	signed := strings.Split(strings.SplitN(auth[i+len("SignedHeaders="):], ",", 2)[0], ";")
	when, err := time.Parse("20060102T150405Z", got.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatalf("X-Amz-Date: %v", err)
	}
	re, err := http.NewRequestWithContext(t.Context(), got.Method, "http://"+got.Host+got.RequestURI, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range signed {
		switch h {
		case "host":
		case "content-length":
			re.ContentLength = got.ContentLength
		default:
			re.Header[http.CanonicalHeaderKey(h)] = got.Header.Values(h)
		}
	}
	creds, _ := testCreds.Retrieve(context.Background())
	s := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := s.SignHTTP(context.Background(), creds, re, got.Header.Get("X-Amz-Content-Sha256"), "s3", region, when); err != nil {
		t.Fatal(err)
	}
	if re.Header.Get("Authorization") != auth {
		t.Errorf("the signature does not cover the request sent:\n got  %s\n want %s", auth, re.Header.Get("Authorization"))
	}
}

// TestS3ClientMatchesSDK: for each configuration, the agent's S3 client
// and the SDK's s3.Client, given the same aws.Config and the same object,
// send a PutObject and a HeadBucket to the same host and path, with the
// same object headers, each signed over what it sends, and the body
// whole. A difference in addressing (virtual-hosted, path-style, FIPS,
// dual-stack, partition, a custom endpoint), in the key's escaping or in
// the signed headers fails here.
func TestS3ClientMatchesSDK(t *testing.T) {
	t.Parallel()
	custom := func(s string) *string { return &s }
	body := []byte("disk 91% full\nkey AKIA… redacted\n")
	for _, tc := range []struct {
		name      string
		region    string
		base      *string
		pathStyle bool
		bucket    string
		sources   []any
	}{
		{name: "virtual-hosted", region: "us-east-1", bucket: "diag-out"},
		{name: "path-style", region: "eu-west-1", bucket: "diag-out", pathStyle: true},
		{name: "bucket with dots", region: "eu-west-1", bucket: "diag.out.example"},
		{name: "china", region: "cn-north-1", bucket: "diag-out"},
		{name: "govcloud", region: "us-gov-west-1", bucket: "diag-out"},
		{name: "fips", region: "us-east-2", bucket: "diag-out", sources: []any{awsconfig.EnvConfig{UseFIPSEndpoint: aws.FIPSEndpointStateEnabled}}},
		{name: "dual-stack", region: "ap-southeast-2", bucket: "diag-out", sources: []any{awsconfig.EnvConfig{UseDualStackEndpoint: aws.DualStackEndpointStateEnabled}}},
		{name: "fips dual-stack", region: "us-west-2", bucket: "diag-out", sources: []any{awsconfig.EnvConfig{
			UseFIPSEndpoint: aws.FIPSEndpointStateEnabled, UseDualStackEndpoint: aws.DualStackEndpointStateEnabled}}},
		{name: "custom endpoint, path-style", region: "us-east-1", base: custom("http://127.0.0.1:9000"), bucket: "diag-out", pathStyle: true},
		{name: "custom endpoint IP", region: "us-east-1", base: custom("http://127.0.0.1:9000"), bucket: "diag-out"},
		{name: "custom endpoint host", region: "us-east-1", base: custom("https://minio.internal:9000/base/"), bucket: "diag-out"},
		{name: "shared config's s3 endpoint_url", region: "us-east-1", bucket: "diag-out", pathStyle: true,
			sources: []any{awsconfig.SharedConfig{Services: awsconfig.Services{ServiceValues: map[string]map[string]string{
				"s3": {"endpoint_url": "http://localhost:4566"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "fleet/a b/2026/12/05/task+1 é~(x).txt"
			meta := map[string]string{MetaRanOnInstanceID: "i-0abc", MetaRanOnHostname: "web-1"}

			sdkWire := &wire{}
			sdk := s3.NewFromConfig(testAWSConfig(tc.region, tc.base, sdkWire, tc.sources...), func(o *s3.Options) { o.UsePathStyle = tc.pathStyle })
			if _, err := sdk.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(tc.bucket), Key: aws.String(key),
				Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("text/plain; charset=utf-8"),
				Metadata: meta, StorageClass: types.StorageClassStandardIa, ServerSideEncryption: types.ServerSideEncryptionAwsKms,
				SSEKMSKeyId: aws.String("alias/autodiag")}); err != nil {
				t.Fatalf("SDK PutObject: %v", err)
			}
			if _, err := sdk.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String(tc.bucket)}); err != nil {
				t.Fatalf("SDK HeadBucket: %v", err)
			}

			ourWire := &wire{}
			ours := NewS3Client(t.Context(), testAWSConfig(tc.region, tc.base, ourWire, tc.sources...), config.S3Config{PathStyle: tc.pathStyle})
			if err := ours.PutObject(t.Context(), PutObjectInput{Bucket: tc.bucket, Key: key, Body: body, ContentType: "text/plain; charset=utf-8",
				Metadata: meta, StorageClass: "STANDARD_IA", SSE: config.SSEKMS, SSEKMSKeyID: "alias/autodiag"}); err != nil {
				t.Fatalf("PutObject: %v", err)
			}
			if err := ours.HeadBucket(t.Context(), tc.bucket); err != nil {
				t.Fatalf("HeadBucket: %v", err)
			}

			if len(sdkWire.sent) != 2 || len(ourWire.sent) != 2 {
				t.Fatalf("requests: SDK %d, ours %d; want 2 each", len(sdkWire.sent), len(ourWire.sent))
			}
			for i, op := range []string{"PutObject", "HeadBucket"} {
				want, got := sdkWire.sent[i], ourWire.sent[i]
				if got.Method != want.Method || got.Host != want.Host || got.RequestURI != want.RequestURI {
					t.Errorf("%s: sent %s %s%s, the SDK %s %s%s", op, got.Method, got.Host, got.RequestURI, want.Method, want.Host, want.RequestURI)
				}
				verifySigV4(t, got, tc.region)
				if !strings.Contains(got.Header.Get("Authorization"), "/"+tc.region+"/s3/aws4_request") {
					t.Errorf("%s: Authorization %q, want the scope %s/s3", op, got.Header.Get("Authorization"), tc.region)
				}
			}
			want, got := sdkWire.sent[0], ourWire.sent[0]
			for _, h := range []string{"Content-Type", "X-Amz-Meta-Ran-On-Instance-Id", "X-Amz-Meta-Ran-On-Hostname",
				"X-Amz-Storage-Class", "X-Amz-Server-Side-Encryption", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"} {
				if got.Header.Get(h) != want.Header.Get(h) || got.Header.Get(h) == "" {
					t.Errorf("PutObject header %s = %q, the SDK's %q", h, got.Header.Get(h), want.Header.Get(h))
				}
			}
			if !bytes.Equal(ourWire.bodies[0], body) || got.ContentLength != int64(len(body)) {
				t.Errorf("PutObject body %q (Content-Length %d), want %q", ourWire.bodies[0], got.ContentLength, body)
			}
		})
	}
}

// Errors read as the SDK's: the API error's code and the status, a HEAD's
// 404 as NotFound; a 503 is retried by the configured retryer, an
// AccessDenied is not.
func TestS3ClientErrorsMatchSDK(t *testing.T) {
	t.Parallel()
	const denied = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message><RequestId>req-1</RequestId></Error>`
	const slow = `<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`
	for _, tc := range []struct {
		name     string
		answers  []func(*http.Request) *http.Response
		head     bool
		requests int // sent, retries included
	}{
		{name: "access denied", answers: []func(*http.Request) *http.Response{answer(403, denied)}, requests: 1},
		{name: "slow down, then stored", answers: []func(*http.Request) *http.Response{answer(503, slow)}, requests: 2},
		{name: "slow down every time", answers: []func(*http.Request) *http.Response{answer(503, slow), answer(503, slow), answer(503, slow)}, requests: 3},
		{name: "no such bucket (HEAD)", answers: []func(*http.Request) *http.Response{answer(404, "")}, head: true, requests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sdkWire := &wire{answers: append([]func(*http.Request) *http.Response(nil), tc.answers...)}
			ourWire := &wire{answers: append([]func(*http.Request) *http.Response(nil), tc.answers...)}
			sdk := s3.NewFromConfig(testAWSConfig("eu-west-1", nil, sdkWire))
			ours := NewS3Client(t.Context(), testAWSConfig("eu-west-1", nil, ourWire), config.S3Config{})
			var sdkErr, ourErr error
			if tc.head {
				_, sdkErr = sdk.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String("diag-out")})
				ourErr = ours.HeadBucket(t.Context(), "diag-out")
			} else {
				_, sdkErr = sdk.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("diag-out"), Key: aws.String("k.txt"), Body: strings.NewReader("x")})
				ourErr = ours.PutObject(t.Context(), PutObjectInput{Bucket: "diag-out", Key: "k.txt", Body: []byte("x")})
			}
			if len(ourWire.sent) != tc.requests || len(sdkWire.sent) != tc.requests {
				t.Errorf("requests sent: ours %d, the SDK %d; want %d", len(ourWire.sent), len(sdkWire.sent), tc.requests)
			}
			if (sdkErr == nil) != (ourErr == nil) {
				t.Fatalf("error %v, the SDK's %v", ourErr, sdkErr)
			}
			if sdkErr == nil {
				return
			}
			var sdkAPI, ourAPI smithy.APIError
			if !errors.As(sdkErr, &sdkAPI) || !errors.As(ourErr, &ourAPI) || ourAPI.ErrorCode() != sdkAPI.ErrorCode() {
				t.Errorf("API error %v, the SDK's %v", ourErr, sdkErr)
			}
			var sdkOp, ourOp *smithy.OperationError
			if !errors.As(sdkErr, &sdkOp) || !errors.As(ourErr, &ourOp) || ourOp.Service() != sdkOp.Service() || ourOp.Operation() != sdkOp.Operation() {
				t.Errorf("operation error %v, the SDK's %v", ourErr, sdkErr)
			}
			var sdkStatus, ourStatus interface{ HTTPStatusCode() int }
			if !errors.As(sdkErr, &sdkStatus) || !errors.As(ourErr, &ourStatus) || ourStatus.HTTPStatusCode() != sdkStatus.HTTPStatusCode() {
				t.Errorf("status of %v, the SDK's %v", ourErr, sdkErr)
			}
		})
	}
}
