package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/internal/testenv"
)

const (
	// benchReportTimeout is report.timeout of the benchmark's agents; the
	// provider fake hangs past it, so every report worker is held by the
	// model for the whole run.
	benchReportTimeout = 60 * time.Second
	// benchReportWorkers is report.workers (the default).
	benchReportWorkers = 2
	// benchReportRounds is how many pairs of runs are measured.
	benchReportRounds = 5
	// benchReportDelay is the DelaySeconds of every task: both queues are
	// filled while both agents wait, and the tasks of both become
	// visible at about the same time.
	benchReportDelay = 3
)

// BenchmarkReportsDoNotSlowDiagnostics measures tasks per second of the
// real agent (`autodiag run`, SQS fake, Redis state, 16 workers) on b.N
// tasks of the noop diagnostic (/bin/true, as BenchmarkSQSIntake), each on
// its own host, in benchReportRounds rounds. Each round runs two agents at
// the same time, each on its own queue with the same tasks, so that what
// else loads the machine loads both alike:
//
//   - off: no report section;
//   - hanging: report.enabled with report.on [succeeded], so every task
//     queues a report job that passes the report limits (one host each),
//     and the openai provider pointed at a fake that answers no request
//     within report.timeout (60s): both report workers hang on the model
//     for the whole run and every other job stays queued.
//
// tasks/s is b.N over the time from the first ReceiveMessage that returned
// messages to the last DeleteMessageBatch, as each agent's SQS fake logged
// them. It reports each round's tasks/s (tasks/s-off-rN,
// tasks/s-hanging-rN), the median tasks/s of each and the median of the
// rounds' hanging/off ratios (ratio): reports must not slow diagnostics,
// so the ratio is 1 within the machine's noise. Run it with a fixed
// count, e.g.
//
//	go test -run '^$' -bench ReportsDoNotSlowDiagnostics -benchtime 2000x ./cmd/autodiag
//
// or scripts/bench-report.
func BenchmarkReportsDoNotSlowDiagnostics(b *testing.B) {
	redisAddr := testenv.RedisAddr(b)
	fake := openaifake.New()
	b.Cleanup(fake.Close)
	fake.SetLatency(2 * benchReportTimeout)
	env := []string{reportKeyEnv + "=" + reportKey}

	pair := func() (off, hanging float64) {
		fqOff, fqOn := newSQSFake(b, "tasks"), newSQSFake(b, "tasks")
		_, pOff := sqsRedis(b)
		_, pOn := sqsRedis(b)
		asked := len(fake.Requests())
		stopOff := startBenchAgent(b, reportBenchYAML(fqOff, redisAddr, pOff, false, fake.BaseURL()), append(env, fqOff.env...)...)
		stopOn := startBenchAgent(b, reportBenchYAML(fqOn, redisAddr, pOn, true, fake.BaseURL()), append(env, fqOn.env...)...)
		visible := sendDelayed(b, b.N, fqOff, fqOn)
		waitDrained(b, fqOff)
		waitDrained(b, fqOn)
		// Out of the measured span: the report workers' first claims may
		// come after the last task, and a draining agent claims nothing.
		want := min(benchReportWorkers, b.N)
		for deadline := time.Now().Add(10 * time.Second); len(fake.Requests())-asked < want && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond) // a benchmark's poll of the fake, not a test waiting
		}
		stopOff()
		stopOn()
		// The report path really ran and really hung: each report worker
		// asked the model once and never got an answer.
		if n := len(fake.Requests()) - asked; n != want {
			b.Fatalf("the model got %d requests, want %d: one per report worker of the agent with reports", n, want)
		}
		return intakeRate(b, fqOff, visible), intakeRate(b, fqOn, visible)
	}

	b.ResetTimer()
	var off, hanging, ratios []float64
	rounds := benchReportRounds
	if b.N == 1 { // the harness's probe run: one pair shows the setup works
		rounds = 1
	}
	for round := range rounds {
		o, h := pair()
		off, hanging, ratios = append(off, o), append(hanging, h), append(ratios, h/o)
		b.ReportMetric(o, fmt.Sprintf("tasks/s-off-r%d", round+1))
		b.ReportMetric(h, fmt.Sprintf("tasks/s-hanging-r%d", round+1))
	}
	b.StopTimer()
	b.ReportMetric(median(off), "tasks/s-off")
	b.ReportMetric(median(hanging), "tasks/s-hanging")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(0, "ns/op")
}

// sendDelayed sends n no-op tasks, one host each, to every queue, ten at a
// time in turn, each delayed benchReportDelay seconds, and returns when
// the first of them become visible, at the earliest.
func sendDelayed(b *testing.B, n int, queues ...*sqsFake) time.Time {
	b.Helper()
	visible := time.Now().Add(benchReportDelay * time.Second)
	for i := 0; i < n; i += 10 {
		for _, fq := range queues {
			entries := make([]types.SendMessageBatchRequestEntry, 0, 10)
			for j := i; j < min(i+10, n); j++ {
				body := fmt.Sprintf(`{"id":"r-%06d","host":"web-%d","diagnostic":"noop"}`, j, j)
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j - i)),
					MessageBody: aws.String(body), DelaySeconds: benchReportDelay})
			}
			out, err := fq.client.SendMessageBatch(b.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(fq.url), Entries: entries})
			if err != nil || len(out.Failed) > 0 {
				b.Fatalf("SendMessageBatch: %v %+v", err, out)
			}
		}
	}
	return visible
}

// reportBenchYAML is the benchmark agent's config: the noop diagnostic
// and, with reports, a report section whose provider never answers and
// that wants a report of every succeeded task.
func reportBenchYAML(fq *sqsFake, redisAddr, prefix string, reports bool, baseURL string) string {
	instance := "bench-reports-off"
	if reports {
		instance = "bench-reports-hanging"
	}
	cfg := sqsAgentConfig{instance: instance, workers: 16, queueURL: fq.url, visibility: time.Minute,
		redisAddr: redisAddr, prefix: prefix}
	// Every diagnostic's timeout within lifecycle.drain_timeout, as
	// config validation wants.
	yaml := strings.Replace(cfg.yaml(), "command: [/bin/true, '{host}']\n    runs_on: any\n    timeout: 60s\n", "command: [/bin/true, '{host}']\n    runs_on: any\n    timeout: 2s\n", 1) +
		"lifecycle:\n  drain_timeout: 3s\n"
	if reports {
		yaml += fmt.Sprintf("report:\n  enabled: true\n  provider: openai\n  model: bench-model\n  base_url: '%s'\n"+
			"  api_key_env: %s\n  timeout: %s\n  workers: %d\n  on: [succeeded]\n", baseURL, reportKeyEnv, benchReportTimeout, benchReportWorkers)
	}
	return yaml
}

// intakeRate is tasks/s between the first receive that returned messages
// and the last delete batch; every message must have been deleted. The
// fake logs when a receive arrived: a long poll that began before the
// tasks were visible (notBefore) counts from notBefore.
func intakeRate(b *testing.B, fq *sqsFake, notBefore time.Time) float64 {
	b.Helper()
	first, last := intakeSpan(b, fq)
	if first.Before(notBefore) {
		first = notBefore
	}
	span := last.Sub(first)
	if span <= 0 {
		b.Fatalf("no span between the first receive (%s) and the last delete (%s)", first, last)
	}
	return float64(b.N) / span.Seconds()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
