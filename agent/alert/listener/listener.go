package listener

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/slackact"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
)

// Error is why the alert listener cannot start: its credentials
// are missing from the environment, or it would be reachable from other
// hosts without them. It is a configuration problem (exit 2).
type Error struct{ Err error }

// The prefix names the listener's config section, intake:.
func (e *Error) Error() string { return "intake: " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Options are what an alert listener's handler needs besides the config.
type Options struct {
	// Getenv reads the credentials the intake.auth section names
	// (os.LookupEnv in cmd).
	Getenv func(string) (string, bool)
	Sender alert.Sender
	// Router routes the alerts: the agent's, built once with its
	// validator and shared with the alarms of its task queue; nil = one
	// compiled here from cfg's routes, catalog and host allow-list (the
	// standalone listener).
	Router *alert.Router
	// Draining answers 503 while true; nil = never.
	Draining func() bool
	Metrics  *alert.Metrics
	Logger   *slog.Logger
	// Redactor redacts every line Logger writes (a rejected alert's
	// detail quotes the alert's values); nil = none.
	Redactor *redact.Redactor
	// Clock stamps the tasks' created_at; nil = the wall clock.
	Clock clock.Clock
	// OnResolved is told of every resolved alert (source, event id),
	// whether a route takes it or not, when the router is compiled here
	// (a Router given watches its own); nil = nobody. It must be bounded:
	// it runs in the request.
	OnResolved func(source, eventID string)
	// Slack serves POST /slack/interactions when intake.slack names a
	// signing secret: its Approver, Feedback, Tasks, Replies and Metrics
	// (the rest NewHandler fills in from cfg); zero = approvals and
	// feedback answered "not configured".
	Slack slackact.Options
}

// NewHandler builds the alert listener's handler for cfg: routes
// compiled against the catalog and host allow-list cfg describes,
// credentials read from the environment. It fails with an *Error
// when a credential is missing or the listener would be open.
func NewHandler(cfg config.Config, o Options) (*alert.Handler, error) {
	if err := cfg.Intake.Validate(); err != nil {
		return nil, &Error{Err: err}
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	creds, err := cfg.Intake.Credentials(getenv)
	if err != nil {
		return nil, &Error{Err: err}
	}
	router := o.Router
	if router == nil {
		v, err := cfg.Validator()
		if err != nil {
			return nil, err
		}
		if router, err = alert.NewRouter(cfg.Routes, v); err != nil {
			return nil, fmt.Errorf("routes: %w", err)
		}
		if o.OnResolved != nil {
			router.WatchResolved(func(a alert.Received) { o.OnResolved(a.Source, a.EventID) })
		}
	}
	if cfg.Intake.Slack.Enabled() {
		if _, err := cfg.Intake.Slack.SigningSecret(getenv); err != nil {
			return nil, &Error{Err: err}
		}
	}
	h, err := alert.NewHandler(alert.HandlerConfig{Router: router, Sender: o.Sender, Credentials: creds,
		LiveCredentials: cfg.Intake.Auth.Live(getenv, creds),
		MaxBody:         cfg.Intake.MaxBodyBytes(), Draining: o.Draining, Metrics: o.Metrics,
		Logger: redact.Logger(o.Logger, o.Redactor), Clock: o.Clock,
		Fetcher: alert.NewTruncatedFetcher(cfg.Intake.Alertmanager, nil)})
	if err != nil || !cfg.Intake.Slack.Enabled() {
		return h, err
	}
	so := o.Slack
	so.Config, so.Getenv, so.MaxBody, so.Clock = cfg.Intake.Slack, getenv, cfg.Intake.MaxBodyBytes(), o.Clock
	so.Logger = redact.Logger(o.Logger, o.Redactor)
	if so.Logger != nil {
		so.Logger = so.Logger.With("component", "slack")
	}
	if so.Replies == nil {
		so.Replies = slackact.NewReplier(nil, nil, so.Logger)
	}
	h.Handle("POST "+slackact.Path, slackact.New(so))
	return h, nil
}

// SQSBatchAPI is the SQS call SQSSender makes; *sqs.Client is the real one.
type SQSBatchAPI interface {
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// sqsBatchMax is SQS's limit of entries per SendMessageBatch.
const sqsBatchMax = 10

// SQSSender sends alert tasks onto the SQS task queue with
// SendMessageBatch, ten per call.
type SQSSender struct {
	api SQSBatchAPI
	url string
}

// NewSQSSender returns a sender onto the queue at url.
func NewSQSSender(api SQSBatchAPI, url string) *SQSSender { return &SQSSender{api: api, url: url} }

// SendBatch sends tasks in calls of ten. An entry SQS refuses fails the
// whole send: the alerting system retries the payload, and dedupe on
// alert.event_id absorbs the tasks that were queued.
func (s *SQSSender) SendBatch(ctx context.Context, tasks []task.Task) error {
	for start := 0; start < len(tasks); start += sqsBatchMax {
		chunk := tasks[start:min(start+sqsBatchMax, len(tasks))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		spans := make([]trace.Span, len(chunk))
		for i := range chunk {
			body, err := json.Marshal(&chunk[i])
			if err != nil {
				endSpans(spans, nil, err)
				return fmt.Errorf("alert task %s: %w", chunk[i].ID, err)
			}
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))}
			var sctx context.Context
			sctx, spans[i] = tracing.StartSend(ctx, tracing.SystemSQS, queue.QueueName(s.url))
			tracing.Inject(sctx, func(k, v string) {
				if entries[i].MessageAttributes == nil {
					entries[i].MessageAttributes = map[string]types.MessageAttributeValue{}
				}
				entries[i].MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			})
		}
		out, err := s.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
		endSpans(spans, out, err)
		if err != nil {
			return fmt.Errorf("sqs: send message batch: %w", err)
		}
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return fmt.Errorf("sqs: send message batch: %d of %d entries failed, first %s: %s",
				len(out.Failed), len(entries), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return nil
}

// endSpans ends the send spans of one batch, each with its message id or
// the failure.
func endSpans(spans []trace.Span, out *sqs.SendMessageBatchOutput, err error) {
	ids := map[string]string{}
	if out != nil {
		for _, ok := range out.Successful {
			ids[aws.ToString(ok.Id)] = aws.ToString(ok.MessageId)
		}
		for _, f := range out.Failed {
			ids[aws.ToString(f.Id)] = ""
		}
	}
	for i, sp := range spans {
		if sp == nil {
			continue
		}
		switch id, ok := ids[strconv.Itoa(i)]; {
		case err != nil:
			tracing.Fail(sp, err)
		case ok && id != "":
			tracing.Sent(sp, id)
		case ok:
			tracing.Fail(sp, errors.New("entry failed"))
		}
		sp.End()
	}
}

var (
	_ alert.Sender = (*SQSSender)(nil)
)

// errNoQueue: a standalone alert listener has nowhere to put tasks without the
// SQS task queue.
var errNoQueue = errors.New("queue.url must be set: a standalone alert listener sends tasks to the fleet's SQS queue")

// Standalone is `autodiag intake`: the alert listener's handler with no
// workers, sending tasks onto the fleet's SQS queue.
type Standalone struct {
	Handler  http.Handler
	Registry *prometheus.Registry
	draining chan struct{}
	close    func()
}

// Stores are the fleet's stores a standalone intake records into when
// Redis is configured: alerts' resolutions and the Slack buttons'
// verdicts. The zero value records neither.
type Stores struct {
	// Resolved records an alert's resolution (resolution.Recorder); nil
	// = not recorded. Bounded: it runs in the request.
	Resolved func(source, eventID string)
	Feedback feedback.Store
	Tasks    slackact.TaskReader
	// Close releases them (the Redis client); nil = nothing to release.
	Close func()
}

// Close releases the stores the intake opened.
func (in *Standalone) Close() {
	if in.close != nil {
		in.close()
	}
}

// AdminHandler is the standalone listener's admin API, served on
// admin_addr like the agent's: GET /metrics (the alert counters, Go and
// process metrics), GET /healthz, and GET /readyz (503 once draining).
func (in *Standalone) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(in.Registry, promhttp.HandlerOpts{Registry: in.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-in.draining:
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "state": "draining"})
		default:
			httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready", "state": "ready"})
		}
	})
	return mux
}

// StartDrain makes the listener answer 503 from now on.
func (in *Standalone) StartDrain() {
	select {
	case <-in.draining:
	default:
		close(in.draining)
	}
}

// Open builds a standalone intake for cfg, its credentials read
// through getenv, recording into the stores opens (nil: none) with its
// metrics on the intake's registry; it fails with an *Error when cfg has
// no intake listener, no task queue, or the credentials are missing.
func Open(cfg config.Config, connect func() (SQSBatchAPI, error), log *slog.Logger, getenv func(string) (string, bool),
	stores func(reg prometheus.Registerer) (Stores, error)) (*Standalone, error) {
	switch {
	case !cfg.Intake.Enabled():
		return nil, &Error{Err: errors.New("intake.addr must be set")}
	case cfg.Queue.URL == "":
		return nil, &Error{Err: errNoQueue}
	}
	api, err := connect()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	in := &Standalone{Registry: reg, draining: make(chan struct{})}
	// Redacted like the agent's alert listener: a rejected alert's detail quotes
	// its values.
	red, err := redact.New(cfg.Results.Redact.Effective(), nil)
	if err != nil {
		return nil, fmt.Errorf("listener: results.redact: %w", err)
	}
	red.SetKnown(cfg.KnownValues(getenv))
	var st Stores
	if stores != nil {
		if st, err = stores(reg); err != nil {
			return nil, err
		}
	}
	in.close = st.Close
	h, err := NewHandler(cfg, Options{Getenv: getenv, Sender: NewSQSSender(api, cfg.Queue.URL), Redactor: red, OnResolved: st.Resolved,
		Draining: func() bool {
			select {
			case <-in.draining:
				return true
			default:
				return false
			}
		},
		Metrics: alert.NewMetrics(reg), Logger: log.With("component", "alert_listener"),
		Slack: slackact.Options{Metrics: slackact.NewMetrics(reg), Feedback: st.Feedback, Tasks: st.Tasks, Timeout: cfg.Redis.Timeout}})
	if err != nil {
		in.Close()
		return nil, err
	}
	in.Handler = h
	return in, nil
}
