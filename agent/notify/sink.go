package notify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/internal/clock"
)

// Sink sends one delivery somewhere. The Dispatcher bounds each Send by
// Timeout and treats any error but a *SendError with Permanent set as
// worth retrying.
type Sink interface {
	Name() string
	// Wants says whether the sink subscribes to events of type t.
	Wants(t EventType) bool
	// Timeout bounds one Send.
	Timeout() time.Duration
	Send(ctx context.Context, d Delivery) error
}

// SendError is a receiver's answer that is not a success.
type SendError struct {
	Status int
	// Permanent: retrying cannot help (a 4xx other than 408 and 429, a
	// redirect, a payload the sink cannot build).
	Permanent bool
	// RetryAfter is the receiver's Retry-After on 429 and 503; 0 if none.
	RetryAfter time.Duration
	// Reason is the dead-letter reason when it is not status_<Status>
	// (ReasonAPIError, ReasonNoTarget); Detail says more, for the log line
	// (an API's error code, never a credential).
	Reason, Detail string
}

// reason is the dead-letter reason of e.
func (e *SendError) reason() string {
	if e.Reason != "" {
		return e.Reason
	}
	return "status_" + strconv.Itoa(e.Status)
}

func (e *SendError) Error() string {
	if e.Reason != "" {
		msg := "notify: " + strings.ReplaceAll(e.Reason, "_", " ")
		if e.Detail != "" {
			msg += ": " + e.Detail
		}
		return msg
	}
	if e.Detail != "" {
		return fmt.Sprintf("notify: receiver answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Detail)
	}
	if e.Status == 0 {
		return "notify: cannot build the request"
	}
	return fmt.Sprintf("notify: receiver answered %d %s", e.Status, http.StatusText(e.Status))
}

// Response bodies are read (so connections are reused) up to this much.
const maxResponseBody = 64 << 10

// Headers of a webhook request.
const (
	HeaderEvent     = "X-Autodiag-Event"
	HeaderDelivery  = "X-Autodiag-Delivery"
	HeaderSignature = "X-Autodiag-Signature"
	// HeaderSignatureV1 carries "t=<unix seconds>,v1=<hex HMAC-SHA256 of
	// "<t>.<body>">": the time is signed with the body, so a captured
	// request replayed later is refused by a receiver that checks it
	// (VerifyV1). HeaderSignature, over the body only, stays for receivers
	// written against it; it can be replayed.
	HeaderSignatureV1 = "X-Autodiag-Signature-V1"
)

// NewHTTPClient is the client sinks use: it never follows a redirect (a
// 3xx is a permanent failure, so a receiver cannot bounce the event, and
// its signature, to another host).
//
// Its connections also meet the outbound URL rules after DNS
// (urlcheck.DialControl): a host name that resolves to the metadata
// service or a link-local address is refused when it is dialled.
func NewHTTPClient() *http.Client { return newHTTPClient("") }

// newHTTPClient is NewHTTPClient that also refuses to dial the agent's
// admin listener at self ("" for none).
func newHTTPClient(self string) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: urlcheck.DialControl(self)}
	tr.DialContext = d.DialContext
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// NewSinks builds the sinks of a validated notify list, reading url_env and
// secret_env through getenv. A missing or empty variable, or a URL in one
// that breaks the outbound URL rules (CheckURL), is an error naming the
// variable, never its value. getenv nil means an empty environment; client
// nil means NewHTTPClient(). A slack sink with a bot token keeps its
// threads in memory: use NewSinksWith to share them through Redis.
func NewSinks(list []SinkConfig, getenv func(string) (string, bool), client *http.Client) ([]Sink, error) {
	return NewSinksWith(list, SinkDeps{Getenv: getenv, Client: client})
}

// SinkDeps are what sinks are built with and what they know of the agent
// around them; zero values mean the defaults.
type SinkDeps struct {
	// Getenv reads url_env, secret_env, token_env and the secrets'
	// values (nil: an empty environment).
	Getenv func(string) (string, bool)
	Client *http.Client // nil: NewHTTPClient()
	// Threads keeps the Slack threads of bot-token sinks (nil: memory;
	// ThreadsFor gives the one of an outbox).
	Threads ThreadStore
	// Self is the agent's admin address (admin_addr); a sink URL that
	// reaches it is refused at start and at every secrets refresh.
	Self string
}

// NewSinksWith is NewSinks with the thread store of bot-token slack sinks
// and the agent's own address.
func NewSinksWith(list []SinkConfig, deps SinkDeps) ([]Sink, error) {
	if err := ValidateSinks(list); err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	getenv, client := deps.Getenv, deps.Client
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	if client == nil {
		client = newHTTPClient(deps.Self)
	}
	if deps.Threads == nil {
		deps.Threads = NewMemoryThreads(nil)
	}
	var errs []error
	var sinks []Sink
	for _, c := range list {
		u := c.URL
		if u == "" {
			switch {
			case c.slackBot():
				u = DefaultSlackAPIURL
			case c.Type == TypePagerDuty:
				u = DefaultPagerDutyURL
			case c.Type == TypeOpsgenie:
				u = DefaultOpsgenieURL
			}
		}
		if name, what := cmp.Or(c.URLSecret, c.URLEnv), kind(c.URLSecret); name != "" {
			v, ok := getenv(name)
			if !ok || v == "" {
				errs = append(errs, fmt.Errorf("notify: sink %s: %s %s is not set", c.Name, what, name))
				continue
			}
			if err := CheckURL(v, c.AllowHTTP, true, deps.Self); err != nil {
				errs = append(errs, fmt.Errorf("notify: sink %s: the URL in %s: %w", c.Name, name, err))
				continue
			}
			u = v
		} else if err := CheckURL(u, c.AllowHTTP, false, deps.Self); err != nil {
			errs = append(errs, fmt.Errorf("notify: sink %s: url: %w", c.Name, err))
			continue
		}
		if c.writeBack() || c.slackBot() {
			// An endpoint from the environment passes the rules of every
			// configured outbound URL too.
			if err := outboundURL(u, c.AllowHTTP); err != nil {
				errs = append(errs, fmt.Errorf("notify: sink %s: url: %w", c.Name, err))
				continue
			}
		}
		var secret []byte
		if name, what := cmp.Or(c.SecretSecret, c.SecretEnv), kind(c.SecretSecret); name != "" {
			v, ok := getenv(name)
			if !ok || v == "" {
				errs = append(errs, fmt.Errorf("notify: sink %s: %s %s is not set", c.Name, what, name))
				continue
			}
			secret = []byte(v)
		}
		base := httpSink{name: c.Name, on: slices.Clone(c.On), timeout: c.EffectiveTimeout(), url: u, client: client,
			urlRef: c.URLSecret, allowHTTP: c.AllowHTTP, self: deps.Self, getenv: getenv, dest: &urlTarget{good: u}}
		var tok credential
		if c.writeBack() || c.slackBot() {
			key, ref, env := "token_env", c.TokenSecret, c.TokenEnv
			if c.slackBot() {
				key, ref, env = "bot_token_env", c.BotTokenSecret, c.BotTokenEnv
			}
			var err error
			if tok, err = readCredential(c.Name, key, ref, env, getenv); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		switch {
		case c.Type == TypeWebhook:
			sinks = append(sinks, &Webhook{httpSink: base, secret: secret, secretRef: c.SecretSecret})
		case c.slackBot():
			sinks = append(sinks, &SlackBot{httpSink: base, token: tok, channel: c.Channel, threads: deps.Threads})
		case c.Type == TypeSlack:
			sinks = append(sinks, &Slack{httpSink: base})
		case c.Type == TypeZabbix:
			sinks = append(sinks, &Zabbix{httpSink: base, token: tok, severity: zabbixSeverity(c.Severity), version: c.Version})
		case c.Type == TypePagerDuty:
			sinks = append(sinks, &PagerDuty{httpSink: base, token: tok, from: c.From})
		case c.Type == TypeOpsgenie:
			sinks = append(sinks, &Opsgenie{httpSink: base, token: tok})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sinks, nil
}

// kind names where a credential is read from in an error.
func kind(ref string) string {
	if ref != "" {
		return "secret"
	}
	return "environment variable"
}

// httpSink is what both sinks share: a name, a subscription, a URL.
type httpSink struct {
	name    string
	on      []EventType
	timeout time.Duration
	url     string // the URL read at start; may be a secret: never logged, never in an error
	client  *http.Client
	// urlRef, when set, is read again through getenv at each send, so a
	// rotated url_secret applies without a restart; dest holds the URL in
	// force.
	urlRef    string
	allowHTTP bool
	self      string
	getenv    func(string) (string, bool)
	dest      *urlTarget
}

// urlTarget is a sink's URL in force and the rotated value last refused.
// Both may be secrets: never logged, never in an error.
type urlTarget struct {
	mu      sync.Mutex
	good    string
	refused string
	// onRefused hears each new rotated value the URL rules refuse (the
	// dispatcher logs and counts it); nil: nobody listens.
	onRefused func(error)
}

// target is the URL in force: urlRef's current value when it passes the
// outbound URL rules, else the last one that did. A refused value is
// never sent to, and is reported once however many sends it meets.
func (s *httpSink) target() string {
	t := s.dest
	if s.urlRef == "" || t == nil {
		return s.url
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := s.getenv(s.urlRef)
	if !ok || v == "" || v == t.good || v == t.refused {
		return t.good
	}
	if err := CheckURL(v, s.allowHTTP, true, s.self); err != nil {
		t.refused = v
		if t.onRefused != nil {
			t.onRefused(err)
		}
		return t.good
	}
	t.good, t.refused = v, ""
	return v
}

// setURLRefused installs the listener of refused rotated URLs.
func (s *httpSink) setURLRefused(f func(error)) {
	if s.dest == nil {
		return
	}
	s.dest.mu.Lock()
	s.dest.onRefused = f
	s.dest.mu.Unlock()
}

func (s *httpSink) Name() string           { return s.name }
func (s *httpSink) Wants(t EventType) bool { return slices.Contains(s.on, t) }
func (s *httpSink) Timeout() time.Duration { return s.timeout }
func (s *httpSink) post(ctx context.Context, body []byte, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target(), bytes.NewReader(body))
	if err != nil {
		return &SendError{Permanent: true}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "autodiag")
	resp, err := s.client.Do(req)
	if err != nil {
		// A *url.Error quotes the URL, which may be a secret: keep only
		// its cause.
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ue.Unwrap() != nil {
			err = ue.Unwrap()
		}
		return fmt.Errorf("notify: post to sink %s: %w", s.name, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	return classify(resp)
}

// classify turns an answer into nil (2xx) or a *SendError.
func classify(resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	e := &SendError{Status: code}
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	default: // 1xx, 3xx (redirects are not followed), other 4xx
		e.Permanent = true
	}
	return e
}

// retryAfterCap bounds a receiver's Retry-After as read; the dispatcher
// waits at most its BackoffMax anyway.
const retryAfterCap = 24 * time.Hour

// retryAfter parses Retry-After (seconds or an HTTP date), at most
// retryAfterCap; 0 if absent or bad.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	s, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil && s >= 0:
		// Capped before the multiplication: a large number must not
		// overflow into a short or negative wait.
		return time.Duration(min(s, int64(retryAfterCap/time.Second))) * time.Second
	case errors.Is(err, strconv.ErrRange) && v[0] != '-':
		return retryAfterCap
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), retryAfterCap)
	}
	return 0
}

// Webhook POSTs the event JSON as it is stored: the body is the same on
// every retry, so is its body-only signature; the V1 signature covers the
// time of each attempt.
type Webhook struct {
	httpSink
	secret []byte
	// secretRef, when set, is read again at each send (a rotated
	// secret_secret); secret is the fallback.
	secretRef string
	clock     clock.Clock // nil: the wall clock; the t of HeaderSignatureV1
}

// key is the HMAC key in force.
func (w *Webhook) key() []byte {
	if w.secretRef != "" {
		if v, ok := w.getenv(w.secretRef); ok && v != "" {
			return []byte(v)
		}
	}
	return w.secret
}

// Send posts d.Body with the event, delivery and (with a secret)
// signature headers.
func (w *Webhook) Send(ctx context.Context, d Delivery) error {
	h := http.Header{}
	h.Set(HeaderEvent, string(d.Event))
	h.Set(HeaderDelivery, d.ID)
	if k := w.key(); k != nil {
		h.Set(HeaderSignature, Sign(k, d.Body))
		var clk clock.Clock = clock.Wall{}
		if w.clock != nil {
			clk = w.clock
		}
		h.Set(HeaderSignatureV1, SignV1(k, d.Body, clk.Now()))
	}
	return w.post(ctx, d.Body, h)
}

// Sign is the X-Autodiag-Signature value of body under key:
// "sha256=" + hex(HMAC-SHA256(key, body)).
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify says whether signature is Sign(key, body), in constant time; a
// receiver written in Go can use it. It does not see replays: use
// VerifyV1.
func Verify(key, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(key, body)), []byte(signature))
}

// SignV1 is the X-Autodiag-Signature-V1 value of body sent at t under key:
// "t=<unix seconds>,v1=" + hex(HMAC-SHA256(key, "<unix seconds>." + body)).
func SignV1(key, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(macV1(key, ts, body))
}

func macV1(key []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// DefaultSignatureTolerance is how old (or how far ahead, for clock skew)
// a V1 signature's time may be: receivers reject older deliveries.
const DefaultSignatureTolerance = 5 * time.Minute

// Errors of VerifyV1.
var (
	ErrSignatureInvalid = errors.New("notify: signature does not match")
	ErrSignatureExpired = errors.New("notify: signature time outside the tolerance (a replay, or a clock far off)")
)

// VerifyV1 checks an X-Autodiag-Signature-V1 value: the HMAC of its time
// and body under key (in constant time), and its time within tolerance of
// now (DefaultSignatureTolerance when 0). Any v1 entry may match, so a
// key rotation can sign with both keys.
func VerifyV1(key, body []byte, header string, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrSignatureInvalid
	}
	want := macV1(key, ts, body)
	ok := false
	for _, s := range sigs {
		ok = hmac.Equal(want, s) || ok
	}
	if !ok {
		return ErrSignatureInvalid
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrSignatureExpired
	}
	return nil
}
