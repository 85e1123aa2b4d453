package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
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
	Channel     string `json:"channel"`
	Text        string `json:"text"`
	Blocks      []any  `json:"blocks,omitempty"`
	ThreadTS    string `json:"thread_ts,omitempty"`
	UnfurlLinks bool   `json:"unfurl_links"`
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
	text, blocks := botMessage(ev, d.Body)
	posted, err := s.post(ctx, slackPost{Channel: s.channel, Text: text, Blocks: blocks, ThreadTS: ts})
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

// The action ids of the bot's buttons, each button's value the task id:
// Slack posts a press to the intake's /slack/interactions (agent/slackact).
const (
	SlackActionApprove       = "approve"
	SlackActionDeny          = "deny"
	SlackActionFeedbackGood  = "feedback_good"
	SlackActionFeedbackWrong = "feedback_wrong"
)

// eventApprovalRequested is the event of a task waiting for a person's
// approval.
const eventApprovalRequested = EventApprovalRequested

// slackActions is a Block Kit actions block.
type slackActions struct {
	Type     string        `json:"type"` // actions
	BlockID  string        `json:"block_id"`
	Elements []slackButton `json:"elements"`
}

// slackButton is a Block Kit button element.
type slackButton struct {
	Type     string        `json:"type"` // button
	ActionID string        `json:"action_id"`
	Text     SlackText     `json:"text"`
	Value    string        `json:"value"`
	Style    string        `json:"style,omitempty"` // primary, danger
	Confirm  *slackConfirm `json:"confirm,omitempty"`
}

// slackConfirm is a Block Kit confirmation dialog.
type slackConfirm struct {
	Title   SlackText `json:"title"`
	Text    SlackText `json:"text"`
	Confirm SlackText `json:"confirm"`
	Deny    SlackText `json:"deny"`
}

func plain(s string) SlackText { return SlackText{Type: "plain_text", Text: s} }

// approvalBody is what an approval_requested event tells beyond the
// task view main knows: the task's approval deadline.
type approvalBody struct {
	Task struct {
		Approval *struct {
			Deadline time.Time `json:"deadline"`
		} `json:"approval"`
	} `json:"task"`
}

// botMessage is ev's message with the buttons a bot can carry: 👍/👎 under
// a report, Approve/Deny on an approval request. body is the event as
// delivered (what an approval request adds to the task view).
func botMessage(ev Event, body []byte) (string, []any) {
	t := ev.Task
	if ev.Type == eventApprovalRequested && t != nil {
		return approvalMessage(ev, body)
	}
	msg := SlackMessage(ev)
	blocks := make([]any, 0, len(msg.Blocks)+1)
	for _, b := range msg.Blocks {
		blocks = append(blocks, b)
	}
	if ev.Type == EventReport && t != nil && len(t.Report) > 0 && string(t.Report) != "null" {
		blocks = append(blocks, slackActions{Type: "actions", BlockID: "autodiag_feedback", Elements: []slackButton{
			{Type: "button", ActionID: SlackActionFeedbackGood, Text: plain("👍 Helpful"), Value: t.ID},
			{Type: "button", ActionID: SlackActionFeedbackWrong, Text: plain("👎 Wrong"), Value: t.ID},
		}})
	}
	return msg.Text, blocks
}

// approvalMessage asks for a decision on ev's task: what would run where,
// by when, and the Approve/Deny buttons.
func approvalMessage(ev Event, body []byte) (string, []any) {
	t := ev.Task
	title := utf8cut.Head(fmt.Sprintf("✋ approval requested: %s on %s", t.Diagnostic, t.Host), slackHeaderMax)
	fields := []*SlackText{
		{Type: "mrkdwn", Text: utf8cut.Head("*Task*\n"+escapeMrkdwn(t.ID), slackFieldMax)},
		{Type: "mrkdwn", Text: utf8cut.Head("*Diagnostic*\n"+escapeMrkdwn(t.Diagnostic), slackFieldMax)},
		{Type: "mrkdwn", Text: utf8cut.Head("*Host*\n"+escapeMrkdwn(t.Host), slackFieldMax)},
	}
	var ab approvalBody
	if json.Unmarshal(body, &ab) == nil && ab.Task.Approval != nil && !ab.Task.Approval.Deadline.IsZero() {
		dl := ab.Task.Approval.Deadline.UTC()
		// Slack shows the date in the reader's zone; the fallback is UTC.
		fields = append(fields, &SlackText{Type: "mrkdwn",
			Text: fmt.Sprintf("*Deadline*\n<!date^%d^{date_short_pretty} {time}|%s>", dl.Unix(), dl.Format(time.RFC3339))})
	}
	if t.Alert != nil && t.Alert.Name != "" {
		fields = append(fields, &SlackText{Type: "mrkdwn", Text: utf8cut.Head("*Alert*\n"+escapeMrkdwn(t.Alert.Name), slackFieldMax)})
	}
	blocks := []any{
		SlackBlock{Type: "header", Text: &SlackText{Type: "plain_text", Text: title}},
		SlackBlock{Type: "section", Fields: fields},
		slackActions{Type: "actions", BlockID: "autodiag_approval", Elements: []slackButton{
			{Type: "button", ActionID: SlackActionApprove, Text: plain("Approve"), Value: t.ID, Style: "primary",
				Confirm: &slackConfirm{Title: plain("Run it?"),
					Text:    plain(utf8cut.Head("Run "+t.Diagnostic+" on "+t.Host+" (task "+t.ID+")?", slackFieldMax)),
					Confirm: plain("Approve"), Deny: plain("Cancel")}},
			{Type: "button", ActionID: SlackActionDeny, Text: plain("Deny"), Value: t.ID, Style: "danger"},
		}},
		SlackBlock{Type: "context", Elements: []*SlackText{{Type: "mrkdwn",
			Text: utf8cut.Head(escapeMrkdwn("`autodiag approve "+t.ID+"`  ·  `autodiag deny "+t.ID+"`  ·  delivery "+ev.ID), slackSectionMax)}}},
	}
	return utf8cut.Head(title, slackFallback), blocks
}
