package main

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/otlpfake"
)

// BenchmarkTracingIntake is the cost of tracing: `autodiag run` (16
// workers, /bin/true, in-memory state) through the SQS fake with tracing
// off, and on at sampler ratio 1.0 exporting every span to an in-process
// OTLP receiver, in the same run (scripts/bench-intake with TRACING=1
// prints on/off). Each task makes 6 spans (process, validate, claim,
// limiter, run, record) and each receive that brought messages one.
func BenchmarkTracingIntake(b *testing.B) {
	run := func(b *testing.B, tracing bool) {
		fq := newSQSFake(b, "tasks")
		prefill(b, fq, b.N)
		yaml := sqsAgentConfig{instance: "bench", workers: 16, queueURL: fq.url, visibility: time.Minute}.yaml()
		var rcv *otlpfake.Receiver
		if tracing {
			rcv = otlpfake.NewCounter()
			defer rcv.Close()
			yaml += "tracing:\n  endpoint: '" + rcv.Endpoint() + "'\n  sampler_ratio: 1.0\n"
		}
		b.ResetTimer()
		cpu := startCPU(b, nil)
		stop := startBenchAgent(b, yaml, fq.env...)
		waitDrained(b, fq)
		b.StopTimer()
		stop()
		cpu.report(b)
		reportRate(b, fq)
		if tracing {
			// The agent flushes its queue at exit; a span dropped by the
			// bounded queue would show here.
			b.ReportMetric(float64(rcv.Counts()["process tasks"])/float64(b.N), "traced/task")
		}
	}
	// Off and on alternate, ROUNDS times (default 1), so that both see
	// the same load of a shared machine; go test's -count would run all
	// the offs first.
	rounds, _ := strconv.Atoi(os.Getenv("ROUNDS"))
	for range max(rounds, 1) {
		b.Run("off", func(b *testing.B) { run(b, false) })
		b.Run("on", func(b *testing.B) { run(b, true) })
	}
}
