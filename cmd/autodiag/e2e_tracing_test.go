package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/internal/fake/otlpfake"
)

// The caller's trace, as Alertmanager behind an instrumented proxy would
// send it.
const (
	e2eTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	e2eParentID = "00f067aa0ba902b7"
	e2eLink     = "https://tempo.example/trace/{trace_id}"
	// loadOutput is what the failing diagnostic prints: it must reach the
	// record and the report, never a span.
	loadOutput = "load average 97.3 on every core"
)

// tracingYAML is an agent on the fake queue with the alert listener, the
// high-load route of the golden routes, uptime failing and memory
// succeeding, a webhook on every task event and reports, reports to the
// OpenAI fake, and tracing to the in-process OTLP receiver.
func tracingYAML(t *testing.T, fq *sqsFake, prefix, redisAddr, hookURL, modelURL, otlp string) string {
	t.Helper()
	fail := filepath.Join(t.TempDir(), "uptime.sh")
	if err := os.WriteFile(fail, []byte("#!/bin/sh\necho '"+loadOutput+"'\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "instance_id: trace-a\nadmin_addr: 127.0.0.1:0\nworkers: 4\n")
	fmt.Fprintf(&b, "queue:\n  url: '%s'\n  wait_time: 1s\n  visibility_timeout: 10s\n", fq.url)
	fmt.Fprintf(&b, "redis:\n  url: 'redis://%s/0'\n  prefix: '%s'\n  timeout: 2s\n", redisAddr, prefix)
	fmt.Fprintf(&b, "intake:\n  addr: 127.0.0.1:0\n  auth: {bearer_token_env: %s}\n", intakeTokenEnv)
	fmt.Fprintf(&b, "diagnostics:\n  - name: uptime\n    command: [/bin/sh, '%s', '{host}']\n    timeout: 10s\n", fail)
	b.WriteString("  - name: memory\n    command: [/bin/true, '{host}']\n    timeout: 10s\n")
	b.WriteString("limiter:\n  hosts:\n    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']\n  rules: []\n")
	b.WriteString("routes:\n  - name: high-load\n    match: {source: [alertmanager], name: '^HighLoad$'}\n" +
		"    host: '{{ .Labels.instance | trimPort }}'\n    tasks: [{diagnostic: uptime}, {diagnostic: memory}]\n" +
		"  - name: ec2-status\n    match: {source: [cloudwatch], name: '^StatusCheckFailed'}\n" +
		"    host: '{{ .Dimensions.InstanceId }}'\n    tasks: [{diagnostic: memory}]\n")
	fmt.Fprintf(&b, "notify:\n  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n    timeout: 5s\n"+
		"    on: [succeeded, failed, report]\n", hookURL)
	fmt.Fprintf(&b, "report:\n  enabled: true\n  provider: openai\n  model: e2e-model\n  base_url: '%s'\n  api_key_env: %s\n"+
		"  timeout: 30s\n  workers: 2\n  limits:\n    - min_interval: 3m\n    - daily: 100\n", modelURL, reportKeyEnv)
	fmt.Fprintf(&b, "tracing:\n  endpoint: '%s'\n  link_template: '%s'\n  compression: gzip\n", otlp, e2eLink)
	return b.String()
}

// spanIndex finds received spans by name and id.
type spanIndex []otlpfake.Span

func (s spanIndex) named(name string) []otlpfake.Span {
	var out []otlpfake.Span
	for _, sp := range s {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

func (s spanIndex) byID(id string) (otlpfake.Span, bool) {
	for _, sp := range s {
		if sp.SpanID == id {
			return sp, true
		}
	}
	return otlpfake.Span{}, false
}

// childrenOf are the spans whose parent is id, by name.
func (s spanIndex) childrenOf(id string) map[string]otlpfake.Span {
	out := map[string]otlpfake.Span{}
	for _, sp := range s {
		if sp.ParentSpanID == id {
			out[sp.Name] = sp
		}
	}
	return out
}

// TestE2ETracing: the real Alertmanager payload of two firing HighLoad
// alerts, posted with the caller's traceparent, becomes one trace: the
// intake's SERVER span under the caller's, a PRODUCER send per task, the
// CONSUMER process span of each (a child of its send, linked to it) with
// validate, claim, limiter, run, keep output and record under it, a
// delivery span per webhook event and, for the failed run, a report span
// with the model call's "chat e2e-model" CLIENT span. The same trace id is
// in each task's record, API view, log lines and webhook body. A
// malformed traceparent on the queue or the alert listener is counted and
// ignored; an X-Ray AWSTraceHeader is continued.
func TestE2ETracing(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "alerts")
	rcv := otlpfake.New()
	t.Cleanup(rcv.Close)
	model := openaifake.New()
	t.Cleanup(model.Close)
	hook := newHookReceiver(t, 0)
	const token = "s3cret-intake-token"
	p := startProc(t, tracingYAML(t, fq, prefix, rc.Options().Addr, hook.srv.URL, model.BaseURL(), rcv.Endpoint()),
		append(fq.env, intakeTokenEnv+"="+token, reportKeyEnv+"="+reportKey)...)
	addr := listenerAddr(t, p)
	const wait = 30 * time.Second
	// The agent learns its hostname as the system says it.
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}

	// What Alertmanager 0.25 sent the alert listener: two firing HighLoad alerts and
	// one resolved, in one group.
	payload, err := os.ReadFile(filepath.Join("testdata", "alertmanager-0.25-highload.json"))
	if err != nil {
		t.Fatal(err)
	}
	code, body := postTraced(t, addr, token, string(payload), "00-"+e2eTraceID+"-"+e2eParentID+"-01")
	if code != http.StatusOK || !strings.Contains(body, `"accepted":2`) {
		t.Fatalf("alert listener answered %d %s, want 2 alerts accepted", code, body)
	}
	eventually(t, wait, "the four tasks to end", func() bool {
		o := sqsOutcomes(p)
		return o["succeeded"] == 2 && o["failed"] == 2
	})
	// The spans of the trace: 1 server, 4 sends, 4 process trees, 2
	// reports with their model call, 6 deliveries (4 outcomes, 2 reports).
	spans, ok := rcv.WaitFor(wait, func(s []otlpfake.Span) bool {
		ix := spanIndex(s)
		return len(ix.named("notify hook")) == 6 && len(ix.named("chat e2e-model")) == 2 && len(ix.named("record")) == 4
	})
	ix := spanIndex(spans)
	if !ok {
		t.Fatalf("the trace is incomplete: %d spans: %v", len(spans), names(spans))
	}

	server := ix.named("POST /v1/alerts/alertmanager")
	if len(server) != 1 {
		t.Fatalf("%d alert listener spans, want 1", len(server))
	}
	srv := server[0]
	if srv.TraceID != e2eTraceID || srv.ParentSpanID != e2eParentID || srv.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("alert listener span %s/%s kind %v, want a SERVER child of the caller's %s/%s", srv.TraceID, srv.ParentSpanID, srv.Kind, e2eTraceID, e2eParentID)
	}
	if srv.Attrs["autodiag.tasks"] != "4" {
		t.Errorf("alert listener span attributes %v, want autodiag.tasks 4", srv.Attrs)
	}
	sends := ix.named("send alerts")
	if len(sends) != 4 {
		t.Fatalf("%d send spans, want 4", len(sends))
	}
	for _, s := range sends {
		if s.ParentSpanID != srv.SpanID || s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || s.Attrs["messaging.system"] != "aws_sqs" ||
			s.Attrs["messaging.destination.name"] != "alerts" || s.Attrs["messaging.message.id"] == "" {
			t.Errorf("send span %+v, want a PRODUCER under the alert listener's with the SQS attributes", s)
		}
	}
	procs := ix.named("process alerts")
	if len(procs) != 4 {
		t.Fatalf("%d process spans, want 4", len(procs))
	}
	outcomes := map[string]int{}
	for _, pr := range procs {
		send, ok := ix.byID(pr.ParentSpanID)
		if !ok || send.Name != "send alerts" || pr.TraceID != e2eTraceID || pr.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
			t.Errorf("process span %+v, want a CONSUMER child of a send span in the caller's trace", pr)
			continue
		}
		if len(pr.Links) != 1 || pr.Links[0].SpanID != send.SpanID {
			t.Errorf("process span links %v, want its send span %s", pr.Links, send.SpanID)
		}
		if pr.Attrs["messaging.message.id"] != send.Attrs["messaging.message.id"] {
			t.Errorf("process message id %q, send's %q", pr.Attrs["messaging.message.id"], send.Attrs["messaging.message.id"])
		}
		outcome, id, diag := pr.Attrs["autodiag.outcome"], pr.Attrs["autodiag.task.id"], pr.Attrs["autodiag.diagnostic"]
		outcomes[diag+" "+outcome]++
		steps := ix.childrenOf(pr.SpanID)
		for _, name := range []string{"validate", "claim", "limiter", "run " + diag, "record", "notify hook"} {
			if _, ok := steps[name]; !ok {
				t.Errorf("task %s: no %q span under its process span (have %v)", id, name, keys(steps))
			}
		}
		if run := steps["run "+diag]; run.Attrs["autodiag.outcome"] != outcome || run.Attrs["process.exit.code"] == "" {
			t.Errorf("run span attributes %v, want the outcome %s and the exit code", run.Attrs, outcome)
		}
		// The process and run spans name the agent that ran the task, as
		// its record does.
		for _, sp := range []otlpfake.Span{pr, steps["run "+diag]} {
			if sp.Attrs["autodiag.ran_on.instance_id"] != "trace-a" || sp.Attrs["autodiag.ran_on.hostname"] != hostname {
				t.Errorf("span %q attributes %v, want autodiag.ran_on.instance_id trace-a and autodiag.ran_on.hostname %q", sp.Name, sp.Attrs, hostname)
			}
		}
		if lim := steps["limiter"]; lim.Attrs["autodiag.limiter.allowed"] != "true" {
			t.Errorf("limiter span attributes %v, want allowed", lim.Attrs)
		}
		if outcome == "failed" {
			rep, ok := steps["report"]
			if !ok {
				t.Errorf("failed task %s: no report span under its process span", id)
			} else {
				chat := ix.childrenOf(rep.SpanID)["chat e2e-model"]
				if chat.Kind != tracepb.Span_SPAN_KIND_CLIENT || chat.Attrs["gen_ai.operation.name"] != "chat" ||
					chat.Attrs["gen_ai.provider.name"] != "openai" || chat.Attrs["gen_ai.request.model"] != "e2e-model" ||
					chat.Attrs["gen_ai.usage.input_tokens"] == "" || chat.Attrs["gen_ai.response.finish_reasons"] == "" {
					t.Errorf("model call span %+v, want a CLIENT chat span with the gen_ai attributes", chat)
				}
			}
		}

		// The same trace in the record, the API, the log lines.
		rec, found := sqsTaskRecord(t, rc, prefix, id)
		if !found || rec.TraceID != e2eTraceID || rec.SpanID != pr.SpanID {
			t.Errorf("record of %s: trace %q span %q, want %s/%s", id, rec.TraceID, rec.SpanID, e2eTraceID, pr.SpanID)
		}
		if rec.RanOn == nil || rec.RanOn.InstanceID != "trace-a" || rec.RanOn.Hostname != hostname {
			t.Errorf("record of %s: ran_on %v, want trace-a (%s)", id, rec.RanOn, hostname)
		}
		resp, err := p.get("/v1/tasks/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var view struct {
			TraceID  string `json:"trace_id"`
			TraceURL string `json:"trace_url"`
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if json.Unmarshal(b, &view) != nil || view.TraceID != e2eTraceID || view.TraceURL != strings.ReplaceAll(e2eLink, "{trace_id}", e2eTraceID) {
			t.Errorf("GET /v1/tasks/%s: %s, want trace_id and trace_url", id, b)
		}
		ended := p.awaitLogsWhere("msg", "task ended", "task_id", id)
		if ended[0]["trace_id"] != e2eTraceID || ended[0]["span_id"] != pr.SpanID {
			t.Errorf("task ended line %v, want trace_id %s span_id %s", ended[0], e2eTraceID, pr.SpanID)
		}
	}
	if want := map[string]int{"uptime failed": 2, "memory succeeded": 2}; !mapsEqual(outcomes, want) {
		t.Errorf("process span outcomes %v, want %v", outcomes, want)
	}
	for _, d := range ix.named("notify hook") {
		if d.TraceID != e2eTraceID || d.Kind != tracepb.Span_SPAN_KIND_CLIENT || d.Attrs["autodiag.sink"] != "hook" {
			t.Errorf("delivery span %+v, want a CLIENT span of sink hook in the trace", d)
		}
	}
	// The webhook bodies carry it too.
	for _, ev := range []string{"succeeded", "failed", "report"} {
		for _, r := range hook.of(ev) {
			var body struct {
				Task struct {
					TraceID  string `json:"trace_id"`
					TraceURL string `json:"trace_url"`
				} `json:"task"`
			}
			if json.Unmarshal(r.body, &body) != nil || body.Task.TraceID != e2eTraceID || !strings.HasSuffix(body.Task.TraceURL, e2eTraceID) {
				t.Errorf("%s webhook body %s, want task.trace_id %s and its link", ev, r.body, e2eTraceID)
			}
		}
	}
	// A receive span per receive that brought messages, linked to their sends.
	recv := ix.named("receive alerts")
	if len(recv) == 0 || recv[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || len(recv[0].Links) == 0 {
		t.Errorf("receive spans %+v, want CLIENT spans linked to the sends", recv)
	}
	// The resource, and nothing of the output or the alert's text.
	for _, s := range spans {
		if s.Resource["service.name"] != "autodiag" || s.Resource["host.id"] != "trace-a" || s.Resource["service.version"] == "" {
			t.Fatalf("resource %v, want service.name autodiag, host.id trace-a, service.version", s.Resource)
		}
		for k, v := range s.Attrs {
			if strings.Contains(v, "load average") || strings.Contains(v, "HighLoad") {
				t.Errorf("span %s attribute %s = %q carries the output or the alert's text", s.Name, k, v)
			}
		}
	}

	t.Run("a malformed traceparent on the queue is counted and ignored", func(t *testing.T) {
		sendWithAttrs(t, fq, `{"id":"tp-bad","host":"web-9","diagnostic":"memory"}`,
			map[string]string{"traceparent": "00-not-a-trace-01"}, "")
		eventually(t, wait, "the task to succeed", func() bool { return sqsOutcomes(p)["succeeded"] == 3 })
		if n := sqsMetric(p, `autodiag_trace_parent_invalid_total{source="sqs"}`); n != 1 {
			t.Errorf("parent_invalid{sqs} = %v, want 1", n)
		}
		rec, _ := sqsTaskRecord(t, rc, prefix, "tp-bad")
		if rec.TraceID == "" || rec.TraceID == e2eTraceID {
			t.Errorf("record trace %q, want a trace of its own", rec.TraceID)
		}
		spans, ok := rcv.WaitFor(wait, func(s []otlpfake.Span) bool { return hasTask(s, "tp-bad") })
		if !ok {
			t.Fatal("no process span of tp-bad")
		}
		for _, s := range spans {
			if s.Name == "process alerts" && s.Attrs["autodiag.task.id"] == "tp-bad" && (s.ParentSpanID != "" || len(s.Links) != 0) {
				t.Errorf("process span of tp-bad has parent %q links %v, want a new root", s.ParentSpanID, s.Links)
			}
		}
	})

	t.Run("an AWSTraceHeader is continued", func(t *testing.T) {
		sendWithAttrs(t, fq, `{"id":"tp-xray","host":"web-8","diagnostic":"memory"}`, nil,
			"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
		eventually(t, wait, "the task to succeed", func() bool { return sqsOutcomes(p)["succeeded"] == 4 })
		rec, _ := sqsTaskRecord(t, rc, prefix, "tp-xray")
		if rec.TraceID != "5759e988bd862e3fe1be46a994272793" {
			t.Errorf("record trace %q, want the X-Ray root's", rec.TraceID)
		}
	})

	t.Run("autodiag enqueue continues the caller's trace", func(t *testing.T) {
		const cliTrace = "0af7651916cd43dd8448eb211c80319c"
		code, out, stderr := runCLI(t, fq.awsEnv(), "enqueue", "--host", "web-7", "--diagnostic", "memory", "--id", "tp-cli",
			"--queue-url", fq.url, "--traceparent", "00-"+cliTrace+"-b7ad6b7169203331-01")
		if code != 0 {
			t.Fatalf("enqueue: exit %d %s %s", code, out, stderr)
		}
		eventually(t, wait, "the task to succeed", func() bool { return sqsOutcomes(p)["succeeded"] == 5 })
		if rec, _ := sqsTaskRecord(t, rc, prefix, "tp-cli"); rec.TraceID != cliTrace {
			t.Errorf("record trace %q, want the caller's %s", rec.TraceID, cliTrace)
		}
		if code, _, stderr := runCLI(t, fq.awsEnv(), "enqueue", "--host", "web-7", "--diagnostic", "memory",
			"--queue-url", fq.url, "--traceparent", "nope"); code != 2 || !strings.Contains(stderr, "--traceparent") {
			t.Errorf("enqueue with a malformed traceparent: exit %d %s, want 2 naming --traceparent", code, stderr)
		}
	})

	t.Run("an alarm routed from the queue is one trace with its tasks", func(t *testing.T) {
		fq.send(t, fixture(t, "sns_cloudwatch_alarm.json"))
		eventually(t, wait, "the alarm's task to succeed", func() bool { return sqsOutcomes(p)["succeeded"] == 6 })
		spans, ok := rcv.WaitFor(wait, func(s []otlpfake.Span) bool {
			ix := spanIndex(s)
			for _, r := range ix.named("route") {
				if send, ok := ix.childrenOf(r.SpanID)["send alerts"]; ok && len(ix.childrenOf(send.SpanID)) > 0 {
					return true
				}
			}
			return false
		})
		ix := spanIndex(spans)
		routes := ix.named("route")
		if !ok || len(routes) != 1 {
			t.Fatalf("%d route spans, want 1", len(routes))
		}
		route := routes[0]
		alarm, _ := ix.byID(route.ParentSpanID)
		sends := ix.childrenOf(route.SpanID)
		send, sent := sends["send alerts"]
		if alarm.Name != "process alerts" || !sent || route.Attrs["autodiag.tasks"] != "1" {
			t.Fatalf("route span %+v under %q with children %v, want it under the alarm's process span sending 1 task", route, alarm.Name, keys(sends))
		}
		var task otlpfake.Span
		for _, s := range ix.named("process alerts") {
			if s.ParentSpanID == send.SpanID {
				task = s
			}
		}
		if task.TraceID != alarm.TraceID || task.Attrs["autodiag.host"] != "i-0abc123def4567890" {
			t.Errorf("the alarm's task %+v, want it in the alarm's trace %s", task, alarm.TraceID)
		}
	})

	t.Run("a malformed traceparent on the alert listener is counted and ignored", func(t *testing.T) {
		code, body := postTraced(t, addr, token, string(payload), "garbage")
		if code != http.StatusOK {
			t.Fatalf("alert listener answered %d %s", code, body)
		}
		if n := sqsMetric(p, `autodiag_trace_parent_invalid_total{source="http"}`); n != 1 {
			t.Errorf("parent_invalid{http} = %v, want 1", n)
		}
	})

	if n := sqsMetric(p, "autodiag_trace_export_errors_total"); n != 0 {
		t.Errorf("export errors = %v, want 0", n)
	}
	if n := sqsMetric(p, "autodiag_trace_spans_exported_total"); n == 0 {
		t.Error("spans exported = 0")
	}
	// The spans of the tasks still ending at the drain are exported at the
	// exit, before the batch's delay.
	p.signal(syscall.SIGTERM)
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
	if _, ok := rcv.WaitFor(time.Second, func(s []otlpfake.Span) bool {
		n := 0
		for _, sp := range s {
			if sp.Name == "process alerts" && sp.Attrs["autodiag.outcome"] == "duplicate" {
				n++
			}
		}
		return n == 4
	}); !ok {
		t.Error("the last tasks' spans were not exported at exit")
	}
	// The drain is a trace of its own.
	var drains []otlpfake.Span
	for _, sp := range rcv.Spans() {
		if sp.Name == "drain" {
			drains = append(drains, sp)
		}
	}
	if len(drains) != 1 || drains[0].ParentSpanID != "" || drains[0].Attrs["autodiag.drain.source"] != "signal" ||
		drains[0].Attrs["autodiag.drain.ending"] == "" {
		t.Errorf("drain spans %+v, want one root span of the signal's drain with its ending", drains)
	}
	for _, r := range rcv.Requests() {
		if r.ContentType != "application/x-protobuf" || r.ContentEncoding != "gzip" {
			t.Errorf("export %+v, want gzipped protobuf", r)
		}
	}
}

func hasTask(spans []otlpfake.Span, id string) bool {
	for _, s := range spans {
		if s.Name == "process alerts" && s.Attrs["autodiag.task.id"] == id {
			return true
		}
	}
	return false
}

func names(spans []otlpfake.Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

func keys(m map[string]otlpfake.Span) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// postTraced posts an Alertmanager payload with a traceparent header.
func postTraced(t *testing.T, addr, token, body, traceparent string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/alerts/alertmanager", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sendWithAttrs sends one message with string attributes and, unless "",
// the AWSTraceHeader system attribute.
func sendWithAttrs(t *testing.T, f *sqsFake, body string, attrs map[string]string, xray string) {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String(body)}
	for k, v := range attrs {
		if in.MessageAttributes == nil {
			in.MessageAttributes = map[string]types.MessageAttributeValue{}
		}
		in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	if xray != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String(xray)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.client.SendMessage(ctx, in); err != nil {
		t.Fatal(err)
	}
}

// TestE2EStandaloneListenerPassesTrace: `autodiag intake` without tracing
// still passes the caller's traceparent on to every task it queues, so the
// agents continue the caller's trace.
func TestE2EStandaloneListenerPassesTrace(t *testing.T) {
	fq := newSQSFake(t, "central")
	const token = "central-token"
	in := startStandaloneListener(t, fq, token)
	tp := "00-" + e2eTraceID + "-" + e2eParentID + "-01"
	code, body := postTraced(t, in.addrs["alert listener listening"], token, fixture(t, "alertmanager_v4.json"), tp)
	if code != http.StatusOK {
		t.Fatalf("answer %d %s", code, body)
	}
	out, err := fq.client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(fq.url), MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 3 {
		t.Fatalf("%d messages, want the 3 tasks", len(out.Messages))
	}
	for _, m := range out.Messages {
		if got := aws.ToString(m.MessageAttributes["traceparent"].StringValue); got != tp {
			t.Errorf("message traceparent %q, want the caller's %q", got, tp)
		}
	}
	// A second signal, once the first was taken (the alert listener answers 503),
	// ends the alert listener's drain grace at once.
	if err := in.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, standaloneDrainGrace, "the alert listener to answer 503", func() bool {
		c, _ := postAlert(t, in.addrs["alert listener listening"], "/v1/alerts/alertmanager", token, "{}")
		return c == http.StatusServiceUnavailable
	})
	if err := in.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-in.Done()
	if err := in.Err(); err != nil {
		t.Errorf("standalone listener exit: %v", err)
	}
}
