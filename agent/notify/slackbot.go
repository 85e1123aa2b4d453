package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// SlackBot posts with a bot token (Web API chat.postMessage) to one
// channel, and threads an alert's events: the first event of an alert
// posts a message, every later one (the result, the report, the
// investigation's tool calls, the resolution) replies under it with
// thread_ts. The thread's ts is kept in the ThreadStore with the alert.
type SlackBot struct {
	httpSink
	token   credential
	channel string
	threads ThreadStore
}

// slackAnswer is chat.postMessage's answer.
type slackAnswer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
	TS    string `json:"ts"`
}

// slackRetryable are the Web API's errors a later try can get past.
var slackRetryable = map[string]bool{"internal_error": true, "fatal_error": true, "service_unavailable": true,
	"request_timeout": true, "ratelimited": true, "team_added_to_org": true}

// slackPost is chat.postMessage's request.
type slackPost struct {
	Channel     string       `json:"channel"`
	Text        string       `json:"text"`
	Blocks      []SlackBlock `json:"blocks,omitempty"`
	ThreadTS    string       `json:"thread_ts,omitempty"`
	UnfurlLinks bool         `json:"unfurl_links"`
}

// threadKeys are the key of ev's thread and the key the event's own task
// is known by (so that an investigation's tool calls, which name the
// task as their parent, find the alert's thread): the alert when the task
// came from one, else the parent task, else the task itself. A drain
// event has none: it is posted on its own.
func threadKeys(ev Event) (key, alias string) {
	t := ev.Task
	if t == nil {
		return "", ""
	}
	alias = "task:" + t.ID
	switch {
	case t.Alert != nil && t.Alert.EventID != "":
		key = "alert:" + t.Alert.Source + ":" + baseEventID(t.Alert.EventID)
	case t.Parent != "":
		key = "task:" + t.Parent
	default:
		key = alias
	}
	return key, alias
}

// Send posts ev's message in its alert's thread, starting the thread when
// the alert has none. A delivery marked posted is not posted again; one
// that finds another delivery of the same alert starting the thread is
// retried, so the thread has one first message.
func (s *SlackBot) Send(ctx context.Context, d Delivery) error {
	var ev Event
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return &SendError{Permanent: true}
	}
	if done, err := s.threads.Posted(ctx, d.ID); err != nil {
		return err
	} else if done {
		return nil
	}
	key, alias := threadKeys(ev)
	var ts string
	if key != "" {
		key = s.name + ":" + key
		alias = s.name + ":" + alias
		var won bool
		var err error
		ts, won, err = s.threads.Begin(ctx, key, d.ID, 2*s.timeout)
		if err != nil {
			return err
		}
		if ts == "" && !won {
			return errThreadStarting
		}
	}
	msg := SlackMessage(ev)
	posted, err := s.post(ctx, slackPost{Channel: s.channel, Text: msg.Text, Blocks: msg.Blocks, ThreadTS: ts})
	if err != nil {
		return err
	}
	// The message is out: what follows is bookkeeping, and failing it
	// must not post it again. A lost thread ts starts a new thread for the
	// alert's next event; a lost mark may post this one twice on a retry.
	if ts == "" && key != "" && posted != "" {
		ts = posted
		_ = s.threads.Keep(ctx, key, ts)
	}
	if alias != "" && alias != key && ts != "" {
		_ = s.threads.Keep(ctx, alias, ts)
	}
	_ = s.threads.MarkPosted(ctx, d.ID)
	return nil
}

// errThreadStarting: another delivery of the alert is posting its first
// message; this one waits for its ts.
var errThreadStarting = errors.New("notify: slack: the alert's thread is being started by another delivery")

// post sends one chat.postMessage and returns the message's ts.
func (s *SlackBot) post(ctx context.Context, p slackPost) (string, error) {
	h := http.Header{"Authorization": {"Bearer " + s.token.get()}, "Content-Type": {"application/json; charset=utf-8"}}
	var ans slackAnswer
	if err := s.apiCall(ctx, http.MethodPost, strings.TrimRight(s.target(), "/")+"/chat.postMessage", h, p, &ans); err != nil {
		return "", err
	}
	if !ans.OK {
		return "", &SendError{Status: http.StatusOK, Permanent: !slackRetryable[ans.Error], Reason: ReasonAPIError,
			Detail: "chat.postMessage: " + strings.Map(safeRune, ans.Error)}
	}
	return ans.TS, nil
}

// safeRune keeps an API error code printable and short.
func safeRune(r rune) rune {
	if r < ' ' || r > '~' {
		return -1
	}
	return r
}
