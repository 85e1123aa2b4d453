package sqsfake

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/autodiag/autodiag/internal/fake/fakefault"
)

const (
	// DefaultAccountID is the account in queue URLs and ARNs.
	DefaultAccountID = "000000000000"
	// DefaultRegion is the region in queue ARNs.
	DefaultRegion = "us-east-1"
	// DefaultInflightLimit is the SQS limit of in-flight messages per
	// standard queue; a receive past it fails with OverLimit.
	DefaultInflightLimit = 120000
	// DefaultCallLogLimit bounds the call log; older entries are dropped.
	DefaultCallLogLimit = 100000

	maxRequestBytes = 4 << 20
	maxVisibility   = 12 * time.Hour
	maxBatchBytes   = 262144
	target          = "AmazonSQS."
)

// Server is the fake SQS endpoint. It is an http.Handler; serve it with
// httptest.NewServer (see NewTestServer) or net/http. All methods are safe for
// concurrent use.
type Server struct {
	clock     Clock
	region    string
	account   string
	inflight  int
	logLimit  int
	macKey    []byte
	queueMu   sync.Mutex // guards queues, deletedAt, baseURL and all queue state
	queues    map[string]*queue
	deletedAt map[string]time.Time
	baseURL   string

	closed    chan struct{}
	closeOnce sync.Once

	rng      *mrand.Rand // set by WithSeed, then owned by faults
	faults   *fakefault.Set[Fault]
	logMu    sync.Mutex // guards calls, seq and counters
	calls    []Call
	seq      int
	counters map[string]int
}

// Option configures a Server.
type Option func(*Server)

// WithClock sets the clock (default RealClock()).
func WithClock(c Clock) Option { return func(s *Server) { s.clock = c } }

// WithRegion sets the region used in ARNs (default "us-east-1").
func WithRegion(r string) Option { return func(s *Server) { s.region = r } }

// WithAccountID sets the account ID used in URLs and ARNs (default
// "000000000000").
func WithAccountID(id string) Option { return func(s *Server) { s.account = id } }

// WithSeed makes probabilistic fault injection deterministic.
func WithSeed(seed uint64) Option {
	return func(s *Server) { s.rng = fakefault.Seeded(seed) }
}

// WithInflightLimit overrides the in-flight limit per queue (default 120000)
// so tests can reach OverLimit cheaply.
func WithInflightLimit(n int) Option { return func(s *Server) { s.inflight = n } }

// WithCallLogLimit bounds the call log (default 100000 entries; counters are
// never dropped).
func WithCallLogLimit(n int) Option { return func(s *Server) { s.logLimit = n } }

// WithBaseURL sets the scheme and host used in queue URLs created through
// Server.CreateQueue (requests use their own Host header).
func WithBaseURL(u string) Option { return func(s *Server) { s.baseURL = strings.TrimRight(u, "/") } }

// New returns an empty Server.
func New(opts ...Option) *Server {
	s := &Server{
		clock:     RealClock(),
		region:    DefaultRegion,
		account:   DefaultAccountID,
		inflight:  DefaultInflightLimit,
		logLimit:  DefaultCallLogLimit,
		queues:    map[string]*queue{},
		deletedAt: map[string]time.Time{},
		counters:  map[string]int{},
		baseURL:   "http://localhost",
		closed:    make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.faults = fakefault.NewSet[Fault](s.rng)
	s.macKey = make([]byte, 32)
	_, _ = rand.Read(s.macKey)
	return s
}

// Close ends every blocked long poll (with an empty response) and injected
// latency, and makes later long polls return at once, so an
// httptest.Server.Close that waits for active requests never hangs. The
// server keeps answering other requests.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

// SetBaseURL sets the scheme and host (e.g. httptest.Server.URL) used in queue
// URLs returned by Server.CreateQueue and Server.QueueURL.
func (s *Server) SetBaseURL(u string) {
	s.queueMu.Lock()
	s.baseURL = strings.TrimRight(u, "/")
	s.queueMu.Unlock()
}

// QueueURL returns the URL of the named queue under the base URL.
func (s *Server) QueueURL(name string) string {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	return s.baseURL + "/" + s.account + "/" + name
}

// QueueARN returns the ARN of the named queue.
func (s *Server) QueueARN(name string) string {
	return "arn:aws:sqs:" + s.region + ":" + s.account + ":" + name
}

// CreateQueue creates a queue as the CreateQueue action does (same
// validation, idempotent for identical attributes) and returns its URL under
// the base URL.
func (s *Server) CreateQueue(name string, attrs map[string]string) (string, error) {
	s.queueMu.Lock()
	_, err := s.createQueueLocked(name, attrs)
	s.queueMu.Unlock()
	if err != nil {
		return "", fmt.Errorf("sqsfake: create queue %s: %w", name, err)
	}
	return s.QueueURL(name), nil
}

// ServeHTTP implements the AWS JSON 1.0 protocol for SQS.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	call := Call{Time: s.clock.Now(), InvocationID: r.Header.Get("Amz-Sdk-Invocation-Id"), Attempt: fakefault.Attempt(r.Header.Get("Amz-Sdk-Request"))}
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), target)
	call.Op = op
	if r.Method != http.MethodPost || !ok || op == "" {
		s.finish(w, &call, nil, clientErr("UnknownOperationException", "UnknownOperationException",
			"expected POST with X-Amz-Target: AmazonSQS.<Operation>"))
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-amz-json-1.0") {
		s.finish(w, &call, nil, clientErr("SerializationException", "SerializationException",
			"unsupported Content-Type %q, want application/x-amz-json-1.0", ct))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return // client went away
	}
	if len(body) > maxRequestBytes {
		s.finish(w, &call, nil, clientErr("RequestEntityTooLarge", "RequestEntityTooLarge", "request too large"))
		return
	}
	call.Queue = queueNameFromBody(body)

	action := s.pickFault(r.Context(), &call)
	if action.err != nil {
		s.finish(w, &call, nil, action.err)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	rc := reqCtx{ctx: r.Context(), host: r.Host, scheme: "http", sender: senderOf(r.Header.Get("Authorization")),
		entryFault: action.entry, duplicate: action.duplicate}
	if r.TLS != nil {
		rc.scheme = "https"
	}
	resp, aerr := s.dispatch(rc, op, body, &call)
	if rc.ctx.Err() != nil && aerr == nil && resp == nil {
		return // long poll abandoned by the client
	}
	switch action.after {
	case FaultDropResponse:
		s.record(&call, 0, "")
		dropConnection(w)
		return
	case FaultServerErrorAfterApply:
		s.finish(w, &call, nil, errInternal())
		return
	}
	s.finish(w, &call, resp, aerr)
}

type reqCtx struct {
	ctx        context.Context
	host       string
	scheme     string
	sender     string
	entryFault *fakefault.Armed[Fault] // armed FaultBatchEntryError, if any
	duplicate  bool                    // FaultDuplicateDelivery fired
}

func (rc reqCtx) queueURL(account, name string) string {
	return rc.scheme + "://" + rc.host + "/" + account + "/" + name
}

func (s *Server) finish(w http.ResponseWriter, call *Call, resp any, aerr *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", newUUID())
	if aerr != nil {
		fault := "Receiver"
		if aerr.sender {
			fault = "Sender"
		}
		h.Set("X-Amzn-Query-Error", aerr.query+";"+fault)
		b, _ := json.Marshal(map[string]string{"__type": aerr.fullType(), "message": aerr.msg})
		s.record(call, aerr.status, aerr.query)
		w.WriteHeader(aerr.status)
		_, _ = w.Write(b)
		return
	}
	if resp == nil {
		resp = struct{}{}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		s.finish(w, call, nil, errInternal())
		return
	}
	s.record(call, http.StatusOK, "")
	_, _ = w.Write(b)
}

// dropConnection closes the connection without a response (TCP RST where
// possible), as a lost response or a crashed front end would.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

var credRe = regexp.MustCompile(`Credential=([^/,\s]+)`)

func senderOf(auth string) string {
	if m := credRe.FindStringSubmatch(auth); m != nil {
		return m[1]
	}
	return "AIDAFAKESQSSENDER"
}

// queueNameFromBody extracts the queue name for the call log before the
// request is decoded fully (faults are recorded with their queue too).
func queueNameFromBody(body []byte) string {
	var v struct {
		QueueUrl  string
		QueueName string
	}
	_ = json.Unmarshal(body, &v)
	if v.QueueName != "" {
		return v.QueueName
	}
	if v.QueueUrl != "" {
		if _, name, ok := splitQueueURL(v.QueueUrl); ok {
			return name
		}
	}
	return ""
}

func splitQueueURL(raw string) (account, name string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func (s *Server) dispatch(rc reqCtx, op string, body []byte, call *Call) (any, *apiError) {
	decode := func(v any) *apiError {
		if err := json.Unmarshal(body, v); err != nil {
			return clientErr("SerializationException", "SerializationException", "cannot decode request: %v", err)
		}
		return nil
	}
	switch op {
	case "CreateQueue":
		var in createQueueIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opCreateQueue(rc, &in)
	case "GetQueueUrl":
		var in getQueueURLIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opGetQueueURL(rc, &in)
	case "GetQueueAttributes":
		var in getQueueAttributesIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opGetQueueAttributes(&in)
	case "SetQueueAttributes":
		var in setQueueAttributesIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opSetQueueAttributes(&in)
	case "DeleteQueue":
		var in queueURLIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opDeleteQueue(&in)
	case "PurgeQueue":
		var in queueURLIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opPurgeQueue(&in, call)
	case "ListQueues":
		var in listQueuesIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opListQueues(rc, &in)
	case "SendMessage":
		var in sendMessageIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opSendMessage(rc, &in, call)
	case "SendMessageBatch":
		var in sendMessageBatchIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opSendMessageBatch(rc, &in, call)
	case "ReceiveMessage":
		var in receiveMessageIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opReceiveMessage(rc, &in, call)
	case "ChangeMessageVisibility":
		var in changeVisibilityIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opChangeMessageVisibility(&in, call)
	case "ChangeMessageVisibilityBatch":
		var in changeVisibilityBatchIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opChangeMessageVisibilityBatch(rc, &in, call)
	case "DeleteMessage":
		var in deleteMessageIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opDeleteMessage(&in, call)
	case "DeleteMessageBatch":
		var in deleteMessageBatchIn
		if e := decode(&in); e != nil {
			return nil, e
		}
		return s.opDeleteMessageBatch(rc, &in, call)
	default:
		return nil, errUnsupported(op)
	}
}

// newUUID returns a random (version 4) UUID, the format of SQS message IDs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// Receipt handles are self-describing: queue name, message ID and the
// message's receive number, authenticated with a per-server key so a forged
// or mangled handle is ReceiptHandleIsInvalid.
func (s *Server) newHandle(queue, msgID string, n int) string {
	payload := queue + "\x00" + msgID + "\x00" + strconv.Itoa(n)
	mac := hmac.New(sha256.New, s.macKey)
	mac.Write([]byte(payload))
	return "AQEB" + base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." +
		base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:12])
}

func (s *Server) parseHandle(h string) (queue, msgID string, n int, ok bool) {
	rest, found := strings.CutPrefix(h, "AQEB")
	if !found {
		return "", "", 0, false
	}
	p64, m64, found := strings.Cut(rest, ".")
	if !found {
		return "", "", 0, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	sum, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return "", "", 0, false
	}
	mac := hmac.New(sha256.New, s.macKey)
	mac.Write(payload)
	if !hmac.Equal(mac.Sum(nil)[:12], sum) {
		return "", "", 0, false
	}
	parts := strings.Split(string(payload), "\x00")
	if len(parts) != 3 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return "", "", 0, false
	}
	return parts[0], parts[1], n, true
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
