package cwfake

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/encoding/cbor"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/fake/fakefault"
)

const (
	// DefaultRegion is the region requests must be signed for.
	DefaultRegion = "us-east-1"
	// SigningName is CloudWatch's SigV4 service name.
	SigningName = "monitoring"

	// servicePath is the RPC v2 path prefix of the CloudWatch service shape.
	servicePath = "/service/GraniteServiceVersion20100801/operation/"
	// maxRequestBytes is CloudWatch's limit on a PutMetricData HTTP POST.
	maxRequestBytes = 1 << 20
	// maxDecodedBytes bounds a gzip body once inflated, so a bad client
	// cannot exhaust the test's memory.
	maxDecodedBytes = 32 << 20
)

// Server is the fake CloudWatch endpoint, an http.Handler. All methods are
// safe for concurrent use.
type Server struct {
	clock  clock.Clock // receipt times and the timestamp window
	region string

	mu      sync.Mutex // guards data, calls, seq and changed
	data    []Datum
	calls   []Call
	seq     int
	changed chan struct{} // closed and replaced after every request

	rng    *mrand.Rand // set by WithSeed, then owned by faults
	faults *fakefault.Set[Fault]
}

// Option configures a Server.
type Option func(*Server)

// WithClock sets the clock (default: time.Now).
func WithClock(c clock.Clock) Option { return func(s *Server) { s.clock = c } }

// WithRegion sets the region requests must be signed for (default
// "us-east-1").
func WithRegion(r string) Option { return func(s *Server) { s.region = r } }

// WithSeed makes probabilistic fault injection deterministic.
func WithSeed(seed uint64) Option {
	return func(s *Server) { s.rng = fakefault.Seeded(seed) }
}

// New returns a Server that has recorded nothing.
func New(opts ...Option) *Server {
	s := &Server{
		clock:   clock.Wall{},
		region:  DefaultRegion,
		changed: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.faults = fakefault.NewSet[Fault](s.rng)
	return s
}

// NewTestServer starts a Server on an httptest server and closes it when tb
// ends. Point the SDK at the returned server's URL (see SDKConfig).
func NewTestServer(tb testing.TB, opts ...Option) (*Server, *httptest.Server) {
	tb.Helper()
	s := New(opts...)
	ts := httptest.NewServer(s)
	tb.Cleanup(ts.Close)
	return s, ts
}

// SDKConfig returns an aws.Config for an SDK client of the fake at endpoint:
// region us-east-1, static dummy credentials.
func SDKConfig(endpoint string) aws.Config {
	return aws.Config{
		Region: DefaultRegion,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDCWFAKE", SecretAccessKey: "SECRET", Source: "cwfake"}, nil
		}),
		BaseEndpoint: aws.String(endpoint),
	}
}

// ServeHTTP implements Smithy RPC v2 CBOR for PutMetricData.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	call := Call{
		Time:         s.clock.Now(),
		InvocationID: r.Header.Get("Amz-Sdk-Invocation-Id"),
		Attempt:      fakefault.Attempt(r.Header.Get("Amz-Sdk-Request")),

		ContentEncoding: r.Header.Get("Content-Encoding"),
	}
	op, routed := strings.CutPrefix(r.URL.Path, servicePath)
	call.Op = op
	switch {
	case r.Method != http.MethodPost || !routed || op == "" || strings.Contains(op, "/"):
		s.finish(w, &call, nil, errUnknownOperation(r.Method+" "+r.URL.Path))
		return
	case op != "PutMetricData":
		s.finish(w, &call, nil, errUnknownOperation(op))
		return
	}
	if aerr := s.checkAuth(r.Header.Get("Authorization")); aerr != nil {
		s.finish(w, &call, nil, aerr)
		return
	}
	if p := r.Header.Get("Smithy-Protocol"); p != "rpc-v2-cbor" {
		s.finish(w, &call, nil, errSerialization("Smithy-Protocol header is %q, want rpc-v2-cbor", p))
		return
	}
	body, aerr := readBody(r)
	if aerr != nil {
		s.finish(w, &call, nil, aerr)
		return
	}
	if len(body) > 0 && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/cbor") {
		s.finish(w, &call, nil, errSerialization("Content-Type is %q, want application/cbor", r.Header.Get("Content-Type")))
		return
	}
	if fault := s.pickFault(&call); fault != nil {
		s.finish(w, &call, nil, fault)
		return
	}
	in, aerr := decodePutMetricData(body)
	if aerr == nil {
		aerr = validate(in, call.Time)
	}
	if aerr != nil {
		s.finish(w, &call, nil, aerr)
		return
	}
	s.finish(w, &call, in, nil)
}

// readBody reads the request payload, inflating a gzip Content-Encoding.
func readBody(r *http.Request) ([]byte, *apiError) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return nil, errSerialization("reading request body: %v", err)
	}
	if len(raw) > maxRequestBytes {
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, shape: "com.amazon.coral.service#RequestEntityTooLargeException",
			query: "RequestEntityTooLarge", sender: true, msgKey: "message",
			msg: fmt.Sprintf("Request size exceeds %d bytes", maxRequestBytes)}
	}
	switch enc := strings.TrimSpace(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
		return raw, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, errSerialization("gzip body: %v", err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, maxDecodedBytes))
		if err != nil {
			return nil, errSerialization("gzip body: %v", err)
		}
		return out, nil
	default:
		return nil, errSerialization("unsupported Content-Encoding %q", enc)
	}
}

var credRe = regexp.MustCompile(`Credential=[^/,\s]+/\d{8}/([^/,\s]+)/([^/,\s]+)/aws4_request`)

// checkAuth requires a SigV4 Authorization header scoped to CloudWatch in
// the fake's region, so a client configured for another service or region
// fails here as it would against a regional endpoint.
func (s *Server) checkAuth(h string) *apiError {
	if !strings.HasPrefix(h, "AWS4-HMAC-SHA256 ") {
		return &apiError{status: http.StatusForbidden, shape: "com.amazon.coral.service#MissingAuthenticationTokenException",
			query: "MissingAuthenticationToken", sender: true, msgKey: "message",
			msg: "Request is missing Authentication Token"}
	}
	m := credRe.FindStringSubmatch(h)
	if m == nil || m[1] != s.region || m[2] != SigningName {
		scope := ""
		if m != nil {
			scope = m[1] + "/" + m[2]
		}
		return &apiError{status: http.StatusForbidden, shape: "com.amazon.coral.service#InvalidSignatureException",
			query: "SignatureDoesNotMatch", sender: true, msgKey: "message",
			msg: fmt.Sprintf("Credential should be scoped to a valid region and service %s/%s, not %q", s.region, SigningName, scope)}
	}
	return nil
}

// finish writes the response and records the call (and, on success, its
// datums), then wakes every Wait.
func (s *Server) finish(w http.ResponseWriter, call *Call, in *putMetricDataInput, aerr *apiError) {
	h := w.Header()
	h.Set("Smithy-Protocol", "rpc-v2-cbor")
	h.Set("X-Amzn-Requestid", newRequestID())
	status := http.StatusOK
	var body []byte
	if aerr != nil {
		status = aerr.status
		call.ErrorCode = aerr.query
		fault := "Receiver"
		if aerr.sender {
			fault = "Sender"
		}
		h.Set("X-Amzn-Query-Error", aerr.query+";"+fault)
		h.Set("Content-Type", "application/cbor")
		body = cbor.Encode(cbor.Map{"__type": cbor.String(aerr.shape), aerr.msgKey: cbor.String(aerr.msg)})
	}
	call.Status = status

	s.mu.Lock()
	s.seq++
	call.Seq = s.seq
	if in != nil {
		call.Datums = len(in.data)
		for _, di := range in.data {
			d := di.Datum
			d.Seq = call.Seq
			d.Received = call.Time
			d.Namespace = *in.namespace
			s.data = append(s.data, d)
		}
	}
	s.calls = append(s.calls, *call)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()

	if body != nil {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Data returns every datum accepted so far, in the order received. The
// slice is a copy; the datums' slices are shared and must not be modified.
func (s *Server) Data() []Datum {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.data)
}

// Calls returns every request received so far, oldest first, including
// rejected, faulted and retried ones.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Reset forgets the recorded data and calls (faults stay armed).
func (s *Server) Reset() {
	s.mu.Lock()
	s.data, s.calls = nil, nil
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Wait blocks until cond holds for the recorded data, or ctx ends. cond is
// evaluated now and again after every request the server answers; it must
// not block or call the Server.
func (s *Server) Wait(ctx context.Context, cond func([]Datum) bool) error {
	return waitFor(ctx, s, func() (bool, int) {
		d := s.Data()
		return cond(d), len(d)
	}, "datums")
}

// WaitCalls blocks until cond holds for the call log, or ctx ends, like
// Wait.
func (s *Server) WaitCalls(ctx context.Context, cond func([]Call) bool) error {
	return waitFor(ctx, s, func() (bool, int) {
		c := s.Calls()
		return cond(c), len(c)
	}, "calls")
}

func waitFor(ctx context.Context, s *Server, check func() (bool, int), what string) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		ok, n := check()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("cwfake: condition not met after %d %s: %w", n, what, ctx.Err())
		}
	}
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
