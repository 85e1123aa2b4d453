package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/imdsmock"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// The lab is the AWS side of the lifecycle end-to-end tests: SQS (task queue
// and lifecycle notification queue), Auto Scaling, CloudWatch and, for the
// imds source, AWS's ec2-metadata-mock. Every request to the fakes goes
// through a lcRecorder that notes when it started and ended on the wall clock
// the agent's log lines use, and whether the client gave up on it (a
// cancelled long poll is not in sqsfake.s own call log).

const (
	lcLabASG       = "asg-e2e"
	lcLabHook      = "drain-hook"
	lcLabOther     = "i-0ther0000000000000" // another instance of the group
	lcTaskQueue    = "tasks"
	lcNotifyQueue  = "lifecycle"
	lcMockInstance = "i-1234567890abcdef0" // what ec2-metadata-mock reports
)

// lcCall is one request to a fake as the recorder saw it.
type lcCall struct {
	Op     string
	Queue  string // SQS: the queue name
	Start  time.Time
	End    time.Time
	Status int  // 0 when nothing was written (abandoned long poll)
	Gone   bool // the client cancelled the request before the answer
	Body   []byte
	// Invocation is the SDK's amz-sdk-invocation-id (sqsfake.Call's
	// InvocationID), Remote the client's address.
	Invocation, Remote string
}

// lcRecorder wraps a fake's handler (wrap).
type lcRecorder struct {
	next http.Handler
	op   func(r *http.Request, body []byte) (op, queue string)
	// before runs ahead of every request (keeps the fakes consistent).
	before func()

	mu    sync.Mutex
	calls []lcCall
}

type lcStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *lcStatusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *lcStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}
func (w *lcStatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// wrap puts the recorder in front of next (a harness.Wrap).
func (rec *lcRecorder) wrap(next http.Handler) http.Handler {
	rec.next = next
	return rec
}

func (rec *lcRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	op, queue := rec.op(r, body)
	if rec.before != nil {
		rec.before()
	}
	sw := &lcStatusWriter{ResponseWriter: w}
	rec.next.ServeHTTP(sw, r)
	c := lcCall{Op: op, Queue: queue, Start: start, End: time.Now(), Status: sw.status, Gone: r.Context().Err() != nil, Body: body,
		Invocation: r.Header.Get("Amz-Sdk-Invocation-Id"), Remote: r.RemoteAddr}
	rec.mu.Lock()
	rec.calls = append(rec.calls, c)
	rec.mu.Unlock()
}

// log returns the recorded calls of op (and queue, when not ""), by start.
func (rec *lcRecorder) log(op, queue string) []lcCall {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []lcCall
	for _, c := range rec.calls {
		if c.Op == op && (queue == "" || c.Queue == queue) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

func lcSqsOp(r *http.Request, body []byte) (string, string) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var in struct{ QueueUrl string }
	_ = json.Unmarshal(body, &in)
	return op, path.Base(in.QueueUrl)
}

func lcAsgOp(_ *http.Request, body []byte) (string, string) {
	form, _ := url.ParseQuery(string(body))
	return form.Get("Action"), ""
}

func lcCwOp(r *http.Request, _ []byte) (string, string) { return path.Base(r.URL.Path), "" }

// lcCloudWatch answers every rpc-v2-cbor operation with an empty CBOR map,
// which is what PutMetricData returns.
func lcCloudWatch(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.Header().Set("Content-Type", "application/cbor")
	_, _ = w.Write([]byte{0xa0})
}

type lcLabOptions struct {
	// scale is how much faster than the wall clock the Auto Scaling fake's
	// clock runs, so that its heartbeat timeout (30s at least, as in AWS)
	// can expire within a test: with scale 10, a 30s timeout is 3s of real
	// time.
	scale   float64
	hookTTL time.Duration // the hook's HeartbeatTimeout on the fake's clock
	// notify sends Auto Scaling's lifecycle notifications to the lifecycle
	// queue (sqs source).
	notify bool
	// visibleAfter hides each action from the Auto Scaling API this long
	// (on the fake's clock) after it starts, as the real API can lag IMDS.
	visibleAfter time.Duration
}

type lcLab struct {
	t        *testing.T
	sqs      *harness.SQS
	sqsRec   *lcRecorder
	sqsURL   string
	client   *sqs.Client
	asg      *asgfake.Server
	asgRec   *lcRecorder
	asgURL   string
	cwRec    *lcRecorder
	cwURL    string
	taskQURL string
	lcQURL   string
	prefix   string
	redis    string
	scale    float64
	clock    harness.FastClock // the Auto Scaling fake's
	hookTTL  time.Duration

	imdsURL string
	imds    *imdsmock.Mock // startIMDSMock's
	syncMu  sync.Mutex
	synced  bool
	// eventAt is when the trigger became visible to the instance: IMDS
	// said Terminated (seen by the lab's 5ms poll) or our notification was
	// sent to the lifecycle queue.
	eventAt time.Time
}

func lcRandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func lcNewLab(t *testing.T, o lcLabOptions) *lcLab {
	t.Helper()
	l := &lcLab{t: t, redis: testenv.RedisAddr(t), scale: o.scale, hookTTL: o.hookTTL}
	if l.scale == 0 {
		l.scale = 1
	}
	if l.hookTTL == 0 {
		l.hookTTL = 30 * time.Second
	}
	l.prefix = fmt.Sprintf("e2e:%s:%s:", strings.ReplaceAll(t.Name(), "/", "_"), lcRandHex(4))

	l.sqsRec = &lcRecorder{op: lcSqsOp}
	fq, err := harness.StartSQS(l.sqsRec.wrap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fq.Close)
	l.sqs, l.sqsURL, l.client = fq, fq.URL, fq.Client
	if l.taskQURL, err = l.sqs.CreateQueue(lcTaskQueue, map[string]string{"VisibilityTimeout": "60"}); err != nil {
		t.Fatal(err)
	}
	if l.lcQURL, err = l.sqs.CreateQueue(lcNotifyQueue, nil); err != nil {
		t.Fatal(err)
	}

	l.clock = harness.NewFastClock(l.scale)
	opts := asgfake.Options{Seed: 5, Now: l.clock.Now, VisibleAfter: o.visibleAfter}
	if o.notify {
		send := fq.Notifier(l.lcQURL, func(err error) { t.Error(err) })
		opts.Notify = func(body string) {
			if strings.Contains(body, lcMockInstance) {
				defer l.setEventAt(time.Now())
			}
			send(body)
		}
	}
	l.asgRec = &lcRecorder{op: lcAsgOp, before: l.syncIMDS}
	asg, err := harness.StartASG(l.asgRec.wrap, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(asg.Close)
	l.asg, l.asgURL = asg.Server, asg.URL
	l.asg.AddGroup(lcLabASG)
	for _, id := range []string{lcMockInstance, lcLabOther} {
		if err := l.asg.AddInstance(lcLabASG, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.asg.PutHook(asgfake.Hook{Group: lcLabASG, Name: lcLabHook, HeartbeatTimeout: l.hookTTL, DefaultResult: asgfake.ResultAbandon}); err != nil {
		t.Fatal(err)
	}

	l.cwRec = &lcRecorder{op: lcCwOp}
	cwURL, stopCW, err := harness.Serve(l.cwRec.wrap(http.HandlerFunc(lcCloudWatch)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopCW)
	l.cwURL = cwURL
	return l
}

// realTTL is the hook's heartbeat timeout in wall-clock time.
func (l *lcLab) realTTL() time.Duration { return l.clock.RealDuration(l.hookTTL) }

// env points the agent's SDK clients at the fakes.
func (l *lcLab) env() []string {
	e := []string{"AWS_ENDPOINT_URL_SQS=" + l.sqsURL, "AWS_ENDPOINT_URL_AUTO_SCALING=" + l.asgURL,
		"AWS_ENDPOINT_URL_CLOUDWATCH=" + l.cwURL}
	if l.imdsURL != "" {
		e = append(e, "AWS_EC2_METADATA_DISABLED=false", "AWS_EC2_METADATA_SERVICE_ENDPOINT="+l.imdsURL)
	}
	return e
}

// config is the agent's YAML: workers, the lifecycle section (indented
// under lifecycle:) and the rest shared by every scenario.
func (l *lcLab) config(workers int, lifecycleYAML string) string {
	return fmt.Sprintf(`
instance_id: %s
admin_addr: 127.0.0.1:0
workers: %d
queue:
  url: %s
  wait_time: 20s
  batch_size: 10
  visibility_timeout: 60s
redis:
  url: redis://%s/0
  prefix: %q
diagnostics:
  - name: sleep
    command: [/bin/sh, -c, 'exec /bin/sleep "$1"', sh, "{param.secs}", "{host}"]
    runs_on: any
    params: {secs: '[0-9]+(\.[0-9]+)?'}
    timeout: 1m
limiter:
  hosts:
    allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*$']
  rules: []
cloudwatch:
  enabled: true
  namespace: autodiag-e2e
lifecycle:
%s`, lcMockInstance, workers, l.taskQURL, l.redis, l.prefix, lifecycleYAML)
}

// enqueue puts one sleep task per duration on the task queue.
func (l *lcLab) enqueue(secs []float64) {
	l.t.Helper()
	bodies := make([]string, len(secs))
	for j := range secs {
		bodies[j] = fmt.Sprintf(`{"id":"t-%03d","host":"web-01","diagnostic":"sleep","params":{"secs":"%s"}}`,
			j, strconv.FormatFloat(secs[j], 'f', 3, 64))
	}
	if _, err := l.sqs.Send(context.Background(), l.taskQURL, bodies...); err != nil {
		l.t.Fatalf("enqueue: %v", err)
	}
}

// startIMDSMock runs ec2-metadata-mock in asglifecycle mode, IMDSv2 only,
// with target-lifecycle-state turning Terminated delay after its start.
func (l *lcLab) startIMDSMock(delay time.Duration) {
	t := l.t
	t.Helper()
	l.imds = testenv.MetadataMock(t, "asglifecycle", "--imdsv2",
		"--asg-termination-delay-sec", strconv.Itoa(int(delay/time.Second)))
	l.imdsURL = l.imds.URL
	stop := t.Context().Done()
	go func() {
		// Auto Scaling and IMDS tell the same story: the instance enters
		// Terminating:Wait the moment IMDS says Terminated (syncIMDS also
		// runs ahead of every Auto Scaling request, so the agent can never
		// reach Auto Scaling before the action exists).
		for !l.isSynced() {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			l.syncIMDS()
		}
	}()
}

// wait is p.wait, failing at once, with the mock's own account, if the
// lab's ec2-metadata-mock dies first: an agent that polls a dead IMDS
// never sees its trigger and would only time out.
func (l *lcLab) wait(p *proc, timeout time.Duration) int {
	l.t.Helper()
	if l.imds == nil {
		return p.wait(timeout)
	}
	select {
	case <-p.Done():
	case <-l.imds.Exited():
		if p.Alive() {
			l.t.Fatalf("the agent had not exited when ec2-metadata-mock died: %v", l.imds.Died())
		}
	case <-time.After(timeout):
		l.t.Fatalf("agent did not exit within %v", timeout)
	}
	return p.wait(timeout) // it has exited: at once
}

// imdsState reads target-lifecycle-state from the mock (IMDSv2).
func (l *lcLab) imdsState() (string, error) { return imdsmock.LifecycleState(l.t.Context(), l.imdsURL) }

func (l *lcLab) setEventAt(at time.Time) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.eventAt.IsZero() {
		l.eventAt = at
	}
}

func (l *lcLab) event() time.Time {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.eventAt
}

func (l *lcLab) isSynced() bool {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.synced
}

// syncIMDS puts our instance into Terminating:Wait once IMDS says Terminated.
func (l *lcLab) syncIMDS() {
	if l.imdsURL == "" {
		return
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced {
		return
	}
	if st, err := l.imdsState(); err != nil || st != "Terminated" {
		return
	}
	l.eventAt = time.Now()
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		l.t.Errorf("asgfake terminate: %v", err)
	}
	l.synced = true
}

// lcLogTime is when the agent wrote a log line (its own "time" field).
func lcLogTime(t *testing.T, l map[string]any) time.Time {
	t.Helper()
	s, _ := l["time"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("log line without a time: %v", l)
	}
	return at
}

// lcFirstLog returns the time of the first line with msg, failing if none
// arrives within 10 s: the agent may write it after an event the test
// observed elsewhere (an API call, a metric).
func lcFirstLog(t *testing.T, p *proc, msg string) (time.Time, map[string]any) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("a %q log line", msg), func() bool { return len(p.logs(msg)) > 0 })
	ls := p.logs(msg)
	return lcLogTime(t, ls[0]), ls[0]
}

func lcMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// durations summarises gaps for the report.
func lcSummary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	var sum time.Duration
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for _, d := range ds {
		sum += d
		lo, hi = min(lo, d), max(hi, d)
	}
	return fmt.Sprintf("n=%d min=%s mean=%s max=%s", len(ds), lcMS(lo), lcMS(sum/time.Duration(len(ds))), lcMS(hi))
}
