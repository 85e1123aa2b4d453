package slackact

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// Path is where Slack's interactivity request URL points on the intake
// listener.
const Path = "/slack/interactions"

// Window is how far a request's X-Slack-Request-Timestamp may be from
// now: Slack's recommendation against replays.
const Window = 5 * time.Minute

// The action ids of the buttons agent/notify's Slack bot posts; each
// button's value is the task id.
const (
	ActionApprove       = notify.SlackActionApprove
	ActionDeny          = notify.SlackActionDeny
	ActionFeedbackGood  = notify.SlackActionFeedbackGood
	ActionFeedbackWrong = notify.SlackActionFeedbackWrong
	// actionNone labels a request refused before its action was read, or
	// whose action is none of the above.
	actionNone = "none"
)

// Results are the values of the result label.
const (
	ResultApproved      = "approved"
	ResultDenied        = "denied"
	ResultRecorded      = "recorded"
	ResultDuplicate     = "duplicate"
	ResultBadSignature  = "bad_signature"
	ResultStale         = "stale_timestamp"
	ResultNotAllowed    = "not_allowed"
	ResultUnknownAction = "unknown_action"
	ResultMalformed     = "malformed"
	ResultNotConfigured = "not_configured"
	ResultNotFound      = "not_found"
	ResultConflict      = "conflict"
	ResultError         = "error"
)

// Approver decides a task awaiting approval; by is "slack:<user id>".
// It returns ErrNotFound for a task that is not awaiting approval there,
// ErrAlreadyDecided (wrapped) for one decided before.
type Approver interface {
	Decide(ctx context.Context, taskID string, approve bool, by, reason string) error
}

// Errors an Approver returns.
var (
	ErrNotFound       = errors.New("slackact: no such task awaiting approval")
	ErrAlreadyDecided = errors.New("slackact: the task was already decided")
)

// TaskReader is what the handler reads of the task store: a verdict is
// placed by the report's diagnostic and confidence.
type TaskReader interface {
	Task(ctx context.Context, id string) (state.TaskRecord, bool, error)
}

// Options are what New needs besides the config.
type Options struct {
	Config alert.SlackConfig
	// Getenv reads the signing secret at each request (a rotated secret
	// applies without a restart).
	Getenv func(string) (string, bool)
	// Approver decides approvals; nil = "approvals are not configured".
	Approver Approver
	// Feedback and Tasks record verdicts; nil = "feedback is not recorded
	// here".
	Feedback feedback.Store
	Tasks    TaskReader
	// Recorded is told of each verdict recorded (the agent's
	// autodiag_report_feedback_total); nil = nobody.
	Recorded func(verdict string)
	// MaxBody bounds a request's body (intake.max_body).
	MaxBody int64
	// Timeout bounds each store call; 0 = 2 s.
	Timeout time.Duration
	// Replies sends the answers to response_url; nil = answers in the
	// response body only.
	Replies *Replier
	Metrics *Metrics
	Clock   clock.Clock
	Logger  *slog.Logger
}

// Metrics counts interactions.
type Metrics struct{ total *prometheus.CounterVec }

// NewMetrics registers autodiag_slack_interactions_total on reg (nil:
// unregistered), every action × result at 0; a registry that has it
// already keeps its collector.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_slack_interactions_total",
		Help: "Slack button presses on the intake (POST /slack/interactions), by action (approve, deny, feedback_good, feedback_wrong, none) and result."},
		[]string{"action", "result"})
	if reg != nil {
		if err := reg.Register(total); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					total = c
				}
			}
		}
	}
	for _, a := range []string{ActionApprove, ActionDeny, ActionFeedbackGood, ActionFeedbackWrong, actionNone} {
		for _, r := range []string{ResultApproved, ResultDenied, ResultRecorded, ResultDuplicate, ResultBadSignature, ResultStale,
			ResultNotAllowed, ResultUnknownAction, ResultMalformed, ResultNotConfigured, ResultNotFound, ResultConflict, ResultError} {
			total.WithLabelValues(a, r)
		}
	}
	return &Metrics{total: total}
}

func (m *Metrics) inc(action, result string) {
	if m != nil {
		m.total.WithLabelValues(action, result).Inc()
	}
}

// Handler serves POST /slack/interactions.
type Handler struct{ o Options }

// New returns the handler of o.
func New(o Options) *Handler {
	if o.MaxBody <= 0 {
		o.MaxBody = alert.DefaultMaxBody
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Getenv == nil {
		o.Getenv = func(string) (string, bool) { return "", false }
	}
	return &Handler{o: o}
}

// interaction is the part of a block_actions payload the handler reads.
type interaction struct {
	Type string `json:"type"`
	User struct {
		ID       string `json:"id"`
		Username string `json:"username"`
	} `json:"user"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
	ResponseURL string `json:"response_url"`
}

// taskIDRE is a task id (agent/task's pattern).
var taskIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// answer is what one request ended as.
type answer struct {
	code           int
	action, result string
	text           string
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, a := h.check(w, r)
	if a.result == "" {
		a = h.act(r.Context(), in)
	}
	h.o.Metrics.inc(a.action, a.result)
	level := slog.LevelInfo
	if a.code >= 400 {
		level = slog.LevelWarn
	}
	h.o.Logger.Log(r.Context(), level, "slack interaction", "action", a.action, "result", a.result, "user", in.User.ID)
	// Only an authenticated payload has a response_url here.
	if in.ResponseURL != "" {
		h.o.Replies.Reply(r.Context(), in.ResponseURL, a.text)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.code)
	_ = json.NewEncoder(w).Encode(map[string]string{"text": a.text, "result": a.result, "response_type": "ephemeral"})
}

// check authenticates the request and reads its payload; a refusal
// comes back with its result set.
func (h *Handler) check(w http.ResponseWriter, r *http.Request) (interaction, answer) {
	var in interaction
	refuse := func(code int, result, text string) (interaction, answer) {
		return interaction{}, answer{code: code, action: actionNone, result: result, text: text}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBody))
	if err != nil {
		return refuse(http.StatusRequestEntityTooLarge, ResultMalformed, "the request body could not be read or is over intake.max_body")
	}
	secret, err := h.o.Config.SigningSecret(h.o.Getenv)
	if err != nil {
		h.o.Logger.Error("slack interaction refused: no signing secret", "err", err)
		return refuse(http.StatusServiceUnavailable, ResultNotConfigured, "the signing secret is not available")
	}
	tsHeader := r.Header.Get("X-Slack-Request-Timestamp")
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return refuse(http.StatusUnauthorized, ResultBadSignature, "X-Slack-Request-Timestamp is missing or not a number")
	}
	if d := h.o.Clock.Now().Sub(time.Unix(ts, 0)); d > Window || d < -Window {
		return refuse(http.StatusUnauthorized, ResultStale, "X-Slack-Request-Timestamp is more than 5 minutes from now")
	}
	if !Verify(secret, tsHeader, body, r.Header.Get("X-Slack-Signature")) {
		return refuse(http.StatusUnauthorized, ResultBadSignature, "X-Slack-Signature does not match the body")
	}
	form, err := url.ParseQuery(string(body))
	if err == nil {
		err = json.Unmarshal([]byte(form.Get("payload")), &in)
	}
	if err != nil {
		return refuse(http.StatusBadRequest, ResultMalformed, "want a form with payload={block_actions JSON}")
	}
	if in.Type != "block_actions" || len(in.Actions) != 1 || in.User.ID == "" {
		return in, answer{code: http.StatusBadRequest, action: actionNone, result: ResultUnknownAction,
			text: "autodiag answers block_actions with one action only"}
	}
	return in, answer{}
}

// Verify reports whether sig is Slack's v0 signature of body sent at
// timestamp ts with secret, compared in constant time.
func Verify(secret, ts string, body []byte, sig string) bool {
	got, ok := strings.CutPrefix(sig, "v0=")
	if !ok {
		return false
	}
	raw, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	return hmac.Equal(raw, Sign(secret, ts, body))
}

// Sign is the HMAC-SHA256 of "v0:<ts>:<body>" with secret.
func Sign(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return m.Sum(nil)
}

// act does the one action of an authenticated interaction.
func (h *Handler) act(ctx context.Context, in interaction) answer {
	act := in.Actions[0]
	by := "slack:" + in.User.ID
	switch act.ActionID {
	case ActionApprove, ActionDeny:
		a := answer{action: act.ActionID}
		if !taskIDRE.MatchString(act.Value) {
			return answer{code: http.StatusBadRequest, action: act.ActionID, result: ResultMalformed, text: "the button names no task"}
		}
		if !slices.Contains(h.o.Config.Approvers, in.User.ID) {
			return answer{code: http.StatusForbidden, action: act.ActionID, result: ResultNotAllowed,
				text: "you are not in intake.slack.approvers: ask an approver"}
		}
		if h.o.Approver == nil {
			return answer{code: http.StatusNotImplemented, action: act.ActionID, result: ResultNotConfigured, text: "approvals are not configured"}
		}
		c, cancel := context.WithTimeout(ctx, h.o.Timeout)
		defer cancel()
		approve := act.ActionID == ActionApprove
		err := h.o.Approver.Decide(c, act.Value, approve, by, "Slack button")
		switch {
		case errors.Is(err, ErrNotFound):
			a.code, a.result, a.text = http.StatusNotFound, ResultNotFound, "task "+act.Value+" is not awaiting approval"
		case errors.Is(err, ErrAlreadyDecided):
			a.code, a.result, a.text = http.StatusConflict, ResultConflict, "task "+act.Value+" was already decided"
		case err != nil:
			h.o.Logger.Warn("slack approval not recorded", "task_id", act.Value, "err", err)
			a.code, a.result, a.text = http.StatusServiceUnavailable, ResultError, "the decision was not recorded; press again"
		case approve:
			a.code, a.result, a.text = http.StatusOK, ResultApproved, "<@"+in.User.ID+"> approved task "+act.Value
		default:
			a.code, a.result, a.text = http.StatusOK, ResultDenied, "<@"+in.User.ID+"> denied task "+act.Value
		}
		return a
	case ActionFeedbackGood, ActionFeedbackWrong:
		return h.feedback(ctx, in.User.ID, act.ActionID, act.Value)
	}
	return answer{code: http.StatusBadRequest, action: actionNone, result: ResultUnknownAction, text: "unknown action"}
}

// feedback records user's verdict on task id's report, once per person.
func (h *Handler) feedback(ctx context.Context, user, action, id string) answer {
	a := answer{action: action}
	switch {
	case !taskIDRE.MatchString(id):
		a.code, a.result, a.text = http.StatusBadRequest, ResultMalformed, "the button names no task"
		return a
	case len(h.o.Config.FeedbackUsers) > 0 && !slices.Contains(h.o.Config.FeedbackUsers, user):
		a.code, a.result, a.text = http.StatusForbidden, ResultNotAllowed, "you are not in intake.slack.feedback_users"
		return a
	case h.o.Feedback == nil || h.o.Tasks == nil:
		a.code, a.result, a.text = http.StatusNotImplemented, ResultNotConfigured, "feedback is not recorded by this intake"
		return a
	}
	verdict := feedback.Good
	if action == ActionFeedbackWrong {
		verdict = feedback.Wrong
	}
	c, cancel := context.WithTimeout(ctx, 2*h.o.Timeout) // the record, then the verdict
	defer cancel()
	rec, ok, err := h.o.Tasks.Task(c, id)
	switch {
	case err != nil:
		a.code, a.result, a.text = http.StatusServiceUnavailable, ResultError, "the task store did not answer; press again"
		return a
	case !ok:
		a.code, a.result, a.text = http.StatusNotFound, ResultNotFound, "task "+id+" not found"
		return a
	case len(rec.Report) == 0 || string(rec.Report) == "null":
		a.code, a.result, a.text = http.StatusConflict, ResultConflict, "task "+id+" has no report"
		return a
	}
	var rep report.Result
	_ = json.Unmarshal(rec.Report, &rep)
	v := feedback.Verdict{TaskID: id, Verdict: verdict, By: "slack:" + user, At: h.o.Clock.Now().UTC(),
		Diagnostic: rec.Diagnostic, Confidence: rep.Confidence}
	got, err := h.o.Feedback.Record(c, v)
	switch {
	case errors.Is(err, feedback.ErrAlreadyRecorded):
		a.code, a.result, a.text = http.StatusOK, ResultDuplicate, "your verdict on task "+id+" was already recorded: "+got.Verdict
	case err != nil:
		h.o.Logger.Warn("slack verdict not recorded", "task_id", id, "err", err)
		a.code, a.result, a.text = http.StatusServiceUnavailable, ResultError, "the verdict was not recorded; press again"
	default:
		a.code, a.result, a.text = http.StatusOK, ResultRecorded, "recorded your verdict on task "+id+": "+verdict
		if h.o.Recorded != nil {
			h.o.Recorded(verdict)
		}
	}
	return a
}
