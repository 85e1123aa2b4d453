package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
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
}

func (e *SendError) Error() string {
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
)

// NewHTTPClient is the client sinks use: it never follows a redirect (a
// 3xx is a permanent failure, so a receiver cannot bounce the event, and
// its signature, to another host).
func NewHTTPClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// NewSinks builds the sinks of a validated notify list, reading url_env and
// secret_env through getenv. A missing or empty variable, or a URL in one
// that is not https (http with allow_http), is an error naming the variable,
// never its value. getenv nil means an empty environment; client nil means
// NewHTTPClient().
func NewSinks(list []SinkConfig, getenv func(string) (string, bool), client *http.Client) ([]Sink, error) {
	if err := ValidateSinks(list); err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	if client == nil {
		client = NewHTTPClient()
	}
	var errs []error
	var sinks []Sink
	for _, c := range list {
		u := c.URL
		if c.URLEnv != "" {
			v, ok := getenv(c.URLEnv)
			if !ok || v == "" {
				errs = append(errs, fmt.Errorf("notify: sink %s: environment variable %s is not set", c.Name, c.URLEnv))
				continue
			}
			if err := checkURL(v, c.AllowHTTP); err != nil {
				errs = append(errs, fmt.Errorf("notify: sink %s: the URL in %s: %w", c.Name, c.URLEnv, err))
				continue
			}
			u = v
		}
		var secret []byte
		if c.SecretEnv != "" {
			v, ok := getenv(c.SecretEnv)
			if !ok || v == "" {
				errs = append(errs, fmt.Errorf("notify: sink %s: environment variable %s is not set", c.Name, c.SecretEnv))
				continue
			}
			secret = []byte(v)
		}
		base := httpSink{name: c.Name, on: slices.Clone(c.On), timeout: c.EffectiveTimeout(), url: u, client: client}
		switch c.Type {
		case TypeWebhook:
			sinks = append(sinks, &Webhook{httpSink: base, secret: secret})
		case TypeSlack:
			sinks = append(sinks, &Slack{httpSink: base})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sinks, nil
}

// httpSink is what both sinks share: a name, a subscription, a URL.
type httpSink struct {
	name    string
	on      []EventType
	timeout time.Duration
	url     string // may be a secret: never logged, never in an error
	client  *http.Client
}

func (s *httpSink) Name() string           { return s.name }
func (s *httpSink) Wants(t EventType) bool { return slices.Contains(s.on, t) }
func (s *httpSink) Timeout() time.Duration { return s.timeout }
func (s *httpSink) post(ctx context.Context, body []byte, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
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

// retryAfter parses Retry-After (seconds or an HTTP date); 0 if absent or bad.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Webhook POSTs the event JSON as it is stored: the body is the same on
// every retry, so is its signature.
type Webhook struct {
	httpSink
	secret []byte
}

// Send posts d.Body with the event, delivery and (with a secret)
// signature headers.
func (w *Webhook) Send(ctx context.Context, d Delivery) error {
	h := http.Header{}
	h.Set(HeaderEvent, string(d.Event))
	h.Set(HeaderDelivery, d.ID)
	if w.secret != nil {
		h.Set(HeaderSignature, Sign(w.secret, d.Body))
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
// receiver written in Go can use it.
func Verify(key, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(key, body)), []byte(signature))
}
