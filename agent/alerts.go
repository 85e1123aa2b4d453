package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
)

// routesInCatalog reports route tasks naming a diagnostic the catalog
// lacks: every alert the route takes would be rejected at run time.
func (c Config) routesInCatalog() error {
	var p problems
	known := map[string]bool{}
	for _, d := range c.Diagnostics {
		known[d.Name] = true
	}
	for i, r := range c.Routes {
		for j, t := range r.Tasks {
			if t.Diagnostic != "" && !known[t.Diagnostic] {
				p.addf(fmt.Sprintf("[%d].tasks[%d].diagnostic", i, j), "%q is not in the diagnostics catalog", t.Diagnostic)
			}
		}
	}
	return p.err()
}

// IntakeError is why the intake listener cannot start: its credentials
// are missing from the environment, or it would be reachable from other
// hosts without them. It is a configuration problem (exit 2).
type IntakeError struct{ Err error }

func (e *IntakeError) Error() string { return "intake: " + e.Err.Error() }

func (e *IntakeError) Unwrap() error { return e.Err }

// IntakeOptions are what an intake handler needs besides the config.
type IntakeOptions struct {
	// Getenv reads the credentials the intake.auth section names
	// (os.LookupEnv in cmd).
	Getenv func(string) (string, bool)
	Sender alert.Sender
	// Draining answers 503 while true; nil = never.
	Draining func() bool
	Metrics  *alert.Metrics
	Logger   *slog.Logger
	Now      func() time.Time
}

// NewIntakeHandler builds the intake listener's handler for cfg: routes
// compiled against the catalog and host allow-list cfg describes,
// credentials read from the environment. It fails with an *IntakeError
// when a credential is missing or the listener would be open.
func NewIntakeHandler(cfg Config, o IntakeOptions) (*alert.Handler, error) {
	if err := cfg.Intake.Validate(); err != nil {
		return nil, &IntakeError{Err: err}
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	creds, err := cfg.Intake.Credentials(getenv)
	if err != nil {
		return nil, &IntakeError{Err: err}
	}
	v, err := NewValidator(cfg)
	if err != nil {
		return nil, err
	}
	router, err := alert.NewRouter(cfg.Routes, v)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	return alert.NewHandler(alert.HandlerConfig{Router: router, Sender: o.Sender, Credentials: creds,
		LiveCredentials: cfg.Intake.Auth.Live(getenv, creds),
		MaxBody:         cfg.Intake.MaxBodyBytes(), Draining: o.Draining, Metrics: o.Metrics, Logger: o.Logger, Now: o.Now,
		Fetcher: alert.NewTruncatedFetcher(cfg.Intake.Alertmanager, nil)})
}

// IntakeHandler is this agent's intake handler: tasks go to its task
// queue, and it answers 503 from the first instant of a drain.
func (a *Agent) IntakeHandler(getenv func(string) (string, bool)) (http.Handler, error) {
	return NewIntakeHandler(a.cfg, IntakeOptions{Getenv: getenv, Sender: a.alerts.sender,
		Draining: func() bool { return a.drain.State() != drain.Running },
		Metrics:  a.alerts.metrics, Logger: redactingLogger(a.log.With("component", "intake"), a.pipeline.redactor), Now: a.d.Clock.Now})
}

// alertRouting is the alert stage on the task queue: CloudWatch alarms
// that reach the queue through SNS or EventBridge become the tasks their
// route makes, sent back onto the queue.
type alertRouting struct {
	router  *alert.Router
	sender  alert.Sender
	metrics *alert.Metrics
}

func newAlertRouting(cfg Config, v *task.Validator, d Deps) (*alertRouting, error) {
	router, err := alert.NewRouter(cfg.Routes, v)
	if err != nil {
		return nil, fmt.Errorf("agent: routes: %w", err)
	}
	sender := d.AlertSender
	if sender == nil {
		sender = SourceSender{Source: d.Source}
	}
	return &alertRouting{router: router, sender: sender, metrics: alert.NewMetrics(d.Registry)}, nil
}

// routeAlert handles a received message that is an alarm rather than a
// task, and reports whether it did. The alarm has no task outcome of its
// own: it is counted in autodiag_alerts_total and logged ("alerts
// routed", with message_id), its tasks are sent onto the queue and end
// there, and the message is deleted. An alarm body that cannot be read is
// rejected like an invalid task (dead-lettered with the reason). When the
// tasks cannot be sent the message comes back after a backoff; the
// limiter's dedupe on alert.event_id absorbs a repeat.
func (p *pipeline) routeAlert(j *job) bool {
	if p.alerts == nil {
		return false
	}
	pl, ok, err := alert.Recognize(j.msg.Body)
	if !ok {
		return false
	}
	// Routing is work of its own, short and not cancellable: started, the
	// drain waits for it rather than handing the message back under it.
	if !j.item.Start(nil) {
		return true // the drain released it first
	}
	log := redact.Logger(p.log, p.redactor).With("message_id", j.msg.ID)
	ctx := context.Background()
	if err != nil {
		ans := alert.Answer{Rejected: []alert.Outcome{{Index: 0, Reason: alert.Reason(err), Detail: err.Error()}}}
		p.alerts.metrics.Record(ctx, log, alert.SourceCloudWatch, pl, ans)
		j.mu.Lock()
		j.task.ID = j.msg.ID
		j.mu.Unlock()
		p.reject(j, err)
		return true
	}
	ans := p.alerts.router.RoutePayload(pl, p.clock.Now())
	if len(ans.Tasks) > 0 {
		if err := callWithin(alert.DefaultSendTimeout, func(ctx context.Context) error {
			return p.alerts.sender.SendBatch(ctx, ans.Tasks)
		}); err != nil {
			delay := retryDelay(j.msg.ReceiveCount)
			log.Warn("alert tasks not queued; the alarm comes back to try again", "source", alert.SourceCloudWatch,
				"tasks", len(ans.Tasks), "retry_after", delay.Seconds(), "err", err)
			p.deferMsg(j, delay)
			p.outcomes.drop(j)
			return true
		}
	}
	p.alerts.metrics.Record(ctx, log, alert.SourceCloudWatch, pl, ans)
	p.outcomes.drop(j)
	p.ack(j)
	return true
}

// SourceSender sends alert tasks one message each through a queue.Source:
// the embedded queue, or SQS when no batch sender is set.
type SourceSender struct{ Source queue.Source }

// SendBatch sends every task; the first failure ends it.
func (s SourceSender) SendBatch(ctx context.Context, tasks []task.Task) error {
	for i := range tasks {
		body, err := json.Marshal(&tasks[i])
		if err != nil {
			return fmt.Errorf("alert task %s: %w", tasks[i].ID, err)
		}
		if _, err := s.Source.Send(ctx, body); err != nil {
			return fmt.Errorf("alert task %s: %w", tasks[i].ID, err)
		}
	}
	return nil
}

// sqsBatchAPI is the SQS call SQSSender makes.
type sqsBatchAPI interface {
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// sqsBatchMax is SQS's limit of entries per SendMessageBatch.
const sqsBatchMax = 10

// SQSSender sends alert tasks onto the SQS task queue with
// SendMessageBatch, ten per call.
type SQSSender struct {
	api sqsBatchAPI
	url string
}

// NewSQSSender returns a sender onto the queue at url.
func NewSQSSender(api sqsBatchAPI, url string) *SQSSender { return &SQSSender{api: api, url: url} }

// SendBatch sends tasks in calls of ten. An entry SQS refuses fails the
// whole send: the alerting system retries the payload, and dedupe on
// alert.event_id absorbs the tasks that were queued.
func (s *SQSSender) SendBatch(ctx context.Context, tasks []task.Task) error {
	for start := 0; start < len(tasks); start += sqsBatchMax {
		chunk := tasks[start:min(start+sqsBatchMax, len(tasks))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i := range chunk {
			body, err := json.Marshal(&chunk[i])
			if err != nil {
				return fmt.Errorf("alert task %s: %w", chunk[i].ID, err)
			}
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))}
		}
		out, err := s.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
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

var (
	_ alert.Sender = SourceSender{}
	_ alert.Sender = (*SQSSender)(nil)
)

// errNoQueue: a standalone intake has nowhere to put tasks without the
// SQS task queue.
var errNoQueue = errors.New("queue.url must be set: a standalone intake sends tasks to the fleet's SQS queue")

// Intake is `autodiag intake`: the intake listener's handler with no
// workers, sending tasks onto the fleet's SQS queue.
type Intake struct {
	Handler  http.Handler
	Registry *prometheus.Registry
	draining chan struct{}
}

// AdminHandler is the standalone intake's admin API, served on
// admin_addr like the agent's: GET /metrics (the alert counters, Go and
// process metrics), GET /healthz, and GET /readyz (503 once draining).
func (in *Intake) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(in.Registry, promhttp.HandlerOpts{Registry: in.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-in.draining:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "state": "draining"})
		default:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "state": "ready"})
		}
	})
	return mux
}

// StartDrain makes the intake answer 503 from now on.
func (in *Intake) StartDrain() {
	select {
	case <-in.draining:
	default:
		close(in.draining)
	}
}

// OpenIntake builds a standalone intake for cfg, its credentials read
// through getenv; it fails with an
// *IntakeError when cfg has no intake listener, no task queue, or the
// credentials are missing.
func OpenIntake(ctx context.Context, cfg Config, o OpenOptions, getenv func(string) (string, bool)) (*Intake, error) {
	switch {
	case !cfg.Intake.Enabled():
		return nil, &IntakeError{Err: errors.New("intake.addr must be set")}
	case cfg.Queue.URL == "":
		return nil, &IntakeError{Err: errNoQueue}
	}
	awsCfg, err := loadAWS(ctx, cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	in := &Intake{Registry: reg, draining: make(chan struct{})}
	// Redacted like the agent's intake: a rejected alert's detail quotes
	// its values.
	red, err := redact.New(cfg.Results.Redact.Effective(), nil)
	if err != nil {
		return nil, fmt.Errorf("agent: results.redact: %w", err)
	}
	log := redact.Logger(orDiscard(o.Logger), red)
	h, err := NewIntakeHandler(cfg, IntakeOptions{Getenv: getenv, Sender: NewSQSSender(sqs.NewFromConfig(awsCfg), cfg.Queue.URL),
		Draining: func() bool {
			select {
			case <-in.draining:
				return true
			default:
				return false
			}
		},
		Metrics: alert.NewMetrics(reg), Logger: log.With("component", "intake")})
	if err != nil {
		return nil, err
	}
	in.Handler = h
	return in, nil
}
