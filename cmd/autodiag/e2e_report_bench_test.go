package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/openaifake"
	"github.com/autodiag/autodiag/internal/testenv"
)

const (
	// benchReportTimeout is report.timeout of the benchmark's agents; the
	// provider fake hangs past it, so every report worker is held by the
	// model for the whole run.
	benchReportTimeout = 60 * time.Second
	// benchReportWorkers is report.workers (the default).
	benchReportWorkers = 2
	// benchReportRounds is how many pairs of runs (one without reports,
	// one with) are measured, in alternating order, so that load drift
	// on a shared machine hits both alike.
	benchReportRounds = 3
)

// BenchmarkReportsDoNotSlowDiagnostics measures tasks per second of the
// real agent (`autodiag run`, SQS fake, Redis state, 16 workers) on b.N
// tasks of the noop diagnostic (/bin/true, as BenchmarkSQSIntake), each on
// its own host, twice in each of benchReportRounds rounds:
//
//   - off: no report section;
//   - hanging: report.enabled with report.on [succeeded], so every task
//     queues a report job that passes the report limits (one host each),
//     and the openai provider pointed at a fake that answers no request
//     within report.timeout (60s): both report workers hang on the model
//     for the whole run and every other job stays queued.
//
// tasks/s is b.N over the time from the first ReceiveMessage that returned
// messages to the last DeleteMessageBatch, as the SQS fake logged them.
// It reports the median tasks/s of each and the median of the rounds'
// hanging/off ratios (ratio): reports must not slow diagnostics, so the
// ratio is 1 within the machine's noise. Run it with a fixed count, e.g.
//
//	go test -run '^$' -bench ReportsDoNotSlowDiagnostics -benchtime 500x ./cmd/autodiag
//
// or scripts/bench-report.
func BenchmarkReportsDoNotSlowDiagnostics(b *testing.B) {
	redisAddr := testenv.RedisAddr(b)
	fake := openaifake.New()
	b.Cleanup(fake.Close)
	fake.SetLatency(2 * benchReportTimeout)

	run := func(reports bool) float64 {
		_, prefix := sqsRedis(b)
		fq := newSQSFake(b, "tasks")
		bodies := make([]string, b.N)
		for i := range bodies {
			bodies[i] = fmt.Sprintf(`{"id":"r-%06d","host":"web-%d","diagnostic":"noop"}`, i, i)
		}
		fq.send(b, bodies...)
		fq.srv.ResetLog()
		asked := len(fake.Requests())
		stop := startBenchAgent(b, reportBenchYAML(fq, redisAddr, prefix, reports, fake.BaseURL()),
			append([]string{reportKeyEnv + "=" + reportKey}, fq.env...)...)
		waitDrained(b, fq)
		// Out of the measured span: the workers' first claims may come
		// after the last task, and a draining agent claims nothing.
		want := 0
		if reports {
			want = min(benchReportWorkers, b.N)
			for deadline := time.Now().Add(10 * time.Second); len(fake.Requests())-asked < want && time.Now().Before(deadline); {
				time.Sleep(2 * time.Millisecond) // a benchmark's poll of the fake, not a test waiting
			}
		}
		stop()
		// The report path really ran and really hung: each worker asked
		// the model once and never got an answer.
		if n := len(fake.Requests()) - asked; n != want {
			b.Fatalf("the model got %d requests in a run (reports %v), want %d: one per report worker", n, reports, want)
		}
		return intakeRate(b, fq)
	}

	b.ResetTimer()
	var off, hanging, ratios []float64
	for round := range benchReportRounds {
		var o, h float64
		if round%2 == 0 {
			o, h = run(false), run(true)
		} else {
			h, o = run(true), run(false)
		}
		off, hanging, ratios = append(off, o), append(hanging, h), append(ratios, h/o)
		b.Logf("round %d (N=%d): off %.1f tasks/s, hanging %.1f tasks/s, hanging/off %.3f", round+1, b.N, o, h, h/o)
	}
	b.StopTimer()
	b.ReportMetric(median(off), "tasks/s-off")
	b.ReportMetric(median(hanging), "tasks/s-hanging")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(0, "ns/op")
}

// reportBenchYAML is the benchmark agent's config: the noop diagnostic
// and, with reports, a report section whose provider never answers and
// that wants a report of every succeeded task.
func reportBenchYAML(fq *sqsFake, redisAddr, prefix string, reports bool, baseURL string) string {
	cfg := sqsAgentConfig{instance: "bench-report", workers: 16, queueURL: fq.url, visibility: time.Minute,
		redisAddr: redisAddr, prefix: prefix}
	// Every diagnostic's timeout within lifecycle.drain_timeout, as
	// config validation wants.
	yaml := strings.Replace(cfg.yaml(), "command: [/bin/true]\n", "command: [/bin/true]\n    timeout: 2s\n", 1) +
		"lifecycle:\n  drain_timeout: 3s\n"
	if reports {
		yaml += fmt.Sprintf("report:\n  enabled: true\n  provider: openai\n  model: bench-model\n  base_url: '%s'\n"+
			"  api_key_env: %s\n  timeout: %s\n  workers: %d\n  on: [succeeded]\n", baseURL, reportKeyEnv, benchReportTimeout, benchReportWorkers)
	}
	return yaml
}

// intakeRate is tasks/s between the first receive that returned messages
// and the last delete batch; every message must have been deleted.
func intakeRate(b *testing.B, fq *sqsFake) float64 {
	b.Helper()
	first, last := intakeSpan(b, fq)
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
