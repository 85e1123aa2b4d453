package slackact

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// ReplyTimeout bounds one reply to a response_url.
const ReplyTimeout = 5 * time.Second

// maxReplies bounds the replies in flight; past it a reply is dropped
// (the answer is in the response body too).
const maxReplies = 16

// SlackHost is the only host a reply goes to (over https): Slack's
// response_url is https://hooks.slack.com/actions/….
const SlackHost = "hooks.slack.com"

// Replier posts answers to a payload's response_url, each in its own
// bounded goroutine, as an ephemeral message to the person who pressed.
type Replier struct {
	client *http.Client
	// allowed says where a reply may go; the default is https to
	// SlackHost only, so a payload cannot point the intake elsewhere.
	allowed func(*url.URL) bool
	slots   chan struct{}
	wg      sync.WaitGroup
	log     *slog.Logger
}

// NewReplier returns a Replier over client (nil: a client of its own);
// allowed nil = https://hooks.slack.com only.
func NewReplier(client *http.Client, allowed func(*url.URL) bool, log *slog.Logger) *Replier {
	if client == nil {
		client = &http.Client{Timeout: ReplyTimeout,
			// A redirect could lead off Slack.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if allowed == nil {
		allowed = func(u *url.URL) bool { return u.Scheme == "https" && u.Hostname() == SlackHost }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Replier{client: client, allowed: allowed, slots: make(chan struct{}, maxReplies), log: log}
}

// Reply posts text to raw in the background, on ctx's values but not its
// end (the request has been answered by then); nil r, a URL not allowed
// or no free slot sends nothing.
func (r *Replier) Reply(ctx context.Context, raw, text string) {
	if r == nil {
		return
	}
	u, err := url.Parse(raw)
	if err != nil || !r.allowed(u) {
		r.log.Warn("slack response_url refused", "host", hostOf(u))
		return
	}
	select {
	case r.slots <- struct{}{}:
	default:
		r.log.Warn("slack reply dropped: too many in flight")
		return
	}
	body, _ := json.Marshal(map[string]any{"response_type": "ephemeral", "replace_original": false, "text": text})
	r.wg.Add(1)
	go func() {
		defer func() { <-r.slots; r.wg.Done() }()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReplyTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.client.Do(req)
		if err != nil {
			r.log.Warn("slack reply not sent", "err", err)
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			r.log.Warn("slack reply refused", "status", resp.StatusCode)
		}
	}()
}

// Wait waits for the replies in flight (each bounded by ReplyTimeout).
func (r *Replier) Wait() {
	if r != nil {
		r.wg.Wait()
	}
}

func hostOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Hostname()
}
