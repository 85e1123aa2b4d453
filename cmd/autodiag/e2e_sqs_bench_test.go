package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	agentpkg "github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// BenchmarkSQSIntake measures tasks per second from a prefilled queue on the
// SQS fake until every message is deleted, b.N messages per run:
//
//   - sdk-loop: a plain SDK loop in this process, ReceiveMessage (10) then
//     DeleteMessageBatch, one at a time: the baseline any SQS consumer pays
//     (a reference, not a target: it keeps no state);
//   - sdk-loop-exec16: 16 such loops that also run /bin/true in its own
//     process group per message: the floor of any consumer that forks a
//     process per task (a reference, not a target);
//   - sdk-loop-state16: the target, 16 hand-written loops in a child
//     process with the agent's guarantees (see e2e_sqs_bench_peer_test.go);
//   - agent-memory: one `autodiag run` child, 16 workers, a no-op
//     diagnostic (/bin/true), in-memory state;
//   - agent-inproc-memory: the same agent in this process (logs discarded),
//     so that -cpuprofile and -blockprofile see it;
//   - agent-redis: the child with Redis state and audit
//     (AUTODIAG_TEST_REDIS_ADDR; skipped without it);
//   - agent-inproc-redis: the same in this process, to profile; run only
//     when the -bench pattern names it.
//
// Each runs with the fake answering at once (rtt=0) and with 10ms added to
// every SQS call (rtt=10ms), nearer a real endpoint, where time a worker
// spends waiting on SQS shows.
//
// tasks/s is b.N over the time from the first ReceiveMessage that returned
// messages to the last DeleteMessageBatch, both as the fake logged them, so
// process start-up is not counted. cpu-us/task is the CPU time of the
// whole run per task (cpuMeter); the rows with a child split it from the
// child's ready line to the drained queue (cpuSplit): own-us/task is the
// child itself (the agent's own CPU), diag-us/task the diagnostics it
// forked, test-us/task this process (the SQS fake), redis-us/task
// redis-server. Run with a fixed count, e.g.
//
//	go test -run '^$' -bench SQSIntake -benchtime 2000x ./cmd/autodiag
//
// or scripts/bench-intake.
func BenchmarkSQSIntake(b *testing.B) {
	for _, rtt := range []time.Duration{0, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%v", rtt), func(b *testing.B) { benchIntake(b, rtt) })
	}
}

func benchIntake(b *testing.B, rtt time.Duration) {
	queue := func(b *testing.B) *sqsFake {
		fq := newSQSFake(b, "tasks")
		prefill(b, fq, b.N)
		if rtt > 0 {
			fq.srv.InjectFault(sqsfake.Fault{Kind: sqsfake.FaultLatency, Latency: rtt})
		}
		return fq
	}
	b.Run("sdk-loop", func(b *testing.B) {
		fq := queue(b)
		b.ResetTimer()
		cpu := startCPU(b, nil)
		ctx := context.Background()
		for {
			out, err := fq.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(fq.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{
					types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameSentTimestamp},
				MessageAttributeNames: []string{"All"},
			})
			if err != nil {
				b.Fatal(err)
			}
			if len(out.Messages) > 0 {
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
				}
				if _, err := fq.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(fq.url), Entries: entries}); err != nil {
					b.Fatal(err)
				}
			}
			if fq.drained(b) {
				break
			}
		}
		b.StopTimer()
		cpu.report(b)
		reportRate(b, fq)
	})
	b.Run("sdk-loop-exec16", func(b *testing.B) {
		fq := queue(b)
		b.ResetTimer()
		cpu := startCPU(b, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for ctx.Err() == nil {
					out, err := fq.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
						QueueUrl: aws.String(fq.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60})
					if err != nil {
						return
					}
					entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
					for i, m := range out.Messages {
						cmd := exec.CommandContext(ctx, "/bin/true")
						cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
						if err := cmd.Run(); err != nil {
							b.Error(err)
						}
						entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
					}
					if len(entries) > 0 {
						if _, err := fq.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(fq.url), Entries: entries}); err != nil {
							return
						}
					}
				}
			})
		}
		waitDrained(b, fq)
		b.StopTimer()
		cancel()
		wg.Wait()
		cpu.report(b)
		reportRate(b, fq)
	})
	child := func(b *testing.B, rc *redis.Client, redisAddr, prefix string) {
		fq := queue(b)
		cfg := sqsAgentConfig{instance: "bench", workers: 16, queueURL: fq.url, visibility: time.Minute,
			redisAddr: redisAddr, prefix: prefix}
		b.ResetTimer()
		cpu := startCPU(b, rc)
		p := startBenchProc(b, benchAgentCmd(b, cfg.yaml(), fq.env...))
		split := startSplit(b, p.cmd.Process.Pid, rc)
		waitDrained(b, fq)
		b.StopTimer()
		split.report(b)
		p.stop()
		cpu.report(b)
		reportRate(b, fq)
	}
	b.Run("agent-memory", func(b *testing.B) { child(b, nil, "", "") })
	inproc := func(b *testing.B, rc *redis.Client, redisAddr, prefix string) {
		fq := queue(b)
		for _, kv := range append(fq.awsEnv(), "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null") {
			k, v, _ := strings.Cut(kv, "=")
			b.Setenv(k, v)
		}
		cfg, err := config.Load([]byte(sqsAgentConfig{instance: "bench", workers: 16, queueURL: fq.url,
			visibility: time.Minute, redisAddr: redisAddr, prefix: prefix}.yaml()), func(string) (string, bool) { return "", false })
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.ResetTimer()
		cpu := startCPU(b, rc)
		a, closeFn, err := agentpkg.Open(ctx, cfg, agentpkg.OpenOptions{Logger: newLogger(io.Discard, "info"), Version: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		defer closeFn()
		runErr := make(chan error, 1)
		go func() { runErr <- a.Run(ctx) }()
		waitDrained(b, fq)
		b.StopTimer()
		a.Drain("bench", "done")
		if err := <-runErr; err != nil {
			b.Error(err)
		}
		cpu.report(b)
		reportRate(b, fq)
	}
	b.Run("agent-inproc-memory", func(b *testing.B) { inproc(b, nil, "", "") })
	// Only when asked for by name (-bench '.*/agent-inproc-redis'): it is
	// there to profile the agent with Redis state, not to be compared.
	if strings.Contains(benchFilter(), "inproc-redis") {
		b.Run("agent-inproc-redis", func(b *testing.B) {
			rc, prefix := sqsRedis(b)
			inproc(b, rc, testenv.RedisAddr(b), prefix)
		})
	}
	b.Run("sdk-loop-state16", func(b *testing.B) {
		rc, prefix := sqsRedis(b)
		countRedis(b, rc, func() {
			fq := queue(b)
			b.ResetTimer()
			cpu := startCPU(b, rc)
			p := startStatePeer(b, fq, 16, testenv.RedisAddr(b), prefix)
			split := startSplit(b, p.cmd.Process.Pid, rc)
			waitDrained(b, fq)
			b.StopTimer()
			split.report(b)
			p.stop()
			cpu.report(b)
			reportRate(b, fq)
		})
	})
	b.Run("agent-redis", func(b *testing.B) {
		rc, prefix := sqsRedis(b)
		countRedis(b, rc, func() { child(b, rc, testenv.RedisAddr(b), prefix) })
	})
}

// cpuMeter measures the CPU time of one variant's run: this process
// (the SQS fake, and the agent or the loops when in process), its
// children that ended (the agent child, the diagnostics) and, with rc,
// the Redis server. It does not move with the machine's load as tasks/s
// does, so it compares runs made at different times.
type cpuMeter struct {
	self, children time.Duration
	redis          float64
	rc             *redis.Client
}

func startCPU(b *testing.B, rc *redis.Client) *cpuMeter {
	m := &cpuMeter{rc: rc}
	m.self, m.children = rusage(b, syscall.RUSAGE_SELF), rusage(b, syscall.RUSAGE_CHILDREN)
	if rc != nil {
		m.redis = redisCPU(b, rc)
	}
	return m
}

// report reports the CPU time since the start, per task, as cpu-us/task.
func (m *cpuMeter) report(b *testing.B) {
	d := rusage(b, syscall.RUSAGE_SELF) - m.self + rusage(b, syscall.RUSAGE_CHILDREN) - m.children
	if m.rc != nil {
		d += time.Duration((redisCPU(b, m.rc) - m.redis) * float64(time.Second))
	}
	b.ReportMetric(float64(d.Microseconds())/float64(b.N), "cpu-us/task")
}

func rusage(b *testing.B, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the Redis server's CPU time, in seconds (INFO cpu).
func redisCPU(b *testing.B, rc *redis.Client) float64 {
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			s += f
		}
	}
	return s
}

// benchFilter is the -test.bench pattern this run was given.
func benchFilter() string {
	if f := flag.Lookup("test.bench"); f != nil {
		return f.Value.String()
	}
	return ""
}

// countRedis reports the Redis commands and round trips per task of run.
// Server-wide: exact when the benchmark has the Redis to itself. The
// replies to the first INFO and to the CPU meters' INFO calls (two for
// cpuMeter, two for cpuSplit) are among the writes counted.
func countRedis(b *testing.B, rc *redis.Client, run func()) {
	before := redisCounters(b, rc)
	run()
	after := redisCounters(b, rc)
	b.ReportMetric(float64(after.calls-before.calls)/float64(b.N), "rediscalls/task")
	b.ReportMetric(float64(after.writes-before.writes-5)/float64(b.N), "roundtrips/task")
}

// redisCounts are server-wide counters of a Redis.
type redisCounts struct {
	// calls is the number of commands run (INFO commandstats, commands
	// inside scripts included), less the INFO calls themselves.
	calls int64
	// writes is the number of reply writes to clients (INFO stats
	// total_writes_processed): one per round trip, as a client sends a
	// command or a pipeline and waits for its replies, which are small
	// enough here for one write each.
	writes int64
}

func redisCounters(b *testing.B, rc *redis.Client) redisCounts {
	info, err := rc.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var c redisCounts
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_writes_processed:"); ok {
			c.writes, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		c.calls += v
	}
	return c
}

// waitDrained polls until every message was deleted.
func waitDrained(b *testing.B, fq *sqsFake) {
	for !fq.drained(b) {
		time.Sleep(2 * time.Millisecond) // a benchmark's poll of the fake, not a test waiting
	}
}

// prefill sends n no-op tasks.
func prefill(b *testing.B, fq *sqsFake, n int) {
	b.Helper()
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = sqsTaskBody(fmt.Sprintf("b-%06d", i), "noop")
	}
	fq.send(b, bodies...)
	fq.srv.ResetLog()
}

// reportRate reports tasks/s between the first receive that returned
// messages and the last delete batch.
func reportRate(b *testing.B, fq *sqsFake) {
	b.Helper()
	first, last := intakeSpan(b, fq)
	if span := last.Sub(first); span > 0 {
		b.ReportMetric(float64(b.N)/span.Seconds(), "tasks/s")
	}
	counts := fq.srv.Counters()
	b.ReportMetric(float64(counts["ReceiveMessage"])/float64(b.N), "receives/task")
	b.ReportMetric(float64(counts["DeleteMessageBatch"])/float64(b.N), "deletebatches/task")
}

// intakeSpan is when the first receive that returned messages and the
// last delete batch happened, as the fake logged them; every one of b.N
// messages must have been deleted.
func intakeSpan(b *testing.B, fq *sqsFake) (first, last time.Time) {
	b.Helper()
	for _, c := range fq.srv.Calls("ReceiveMessage", "DeleteMessageBatch") {
		switch {
		case c.Op == "ReceiveMessage" && c.N > 0 && first.IsZero():
			first = c.Time
		case c.Op == "DeleteMessageBatch" && c.Status == 200:
			last = c.Time
		}
	}
	_, _, _, st := fq.stats(b)
	if st.Deleted != b.N {
		b.Fatalf("deleted %d of %d", st.Deleted, b.N)
	}
	return first, last
}

// startBenchAgent runs `autodiag run` with yaml, waits for its ready line
// and returns a func that drains it (SIGTERM) and waits for its exit.
func startBenchAgent(b *testing.B, yaml string, env ...string) func() {
	b.Helper()
	return startBenchProc(b, benchAgentCmd(b, yaml, env...)).stop
}

// benchAgentCmd is `autodiag run` with yaml as its config file.
func benchAgentCmd(b *testing.B, yaml string, env ...string) *exec.Cmd {
	b.Helper()
	path := filepath.Join(b.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.CommandContext(b.Context(), binPath, "run", "--config", path)
	cmd.Env = append(harness.BaseEnv(b.TempDir()), env...)
	if dir := os.Getenv(benchProfileDir); dir != "" {
		name := strings.NewReplacer("/", "_", "=", "").Replace(b.Name())
		cmd.Env = append(cmd.Env, envCPUProfile+"="+filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, time.Now().UnixNano())))
	}
	return cmd
}

// benchProfileDir, when set (scripts/bench-intake PROFILE=dir), is where
// every `autodiag run` child of a benchmark writes a CPU profile of its
// run (AUTODIAG_CPU_PROFILE), one file per run named after the benchmark.
const benchProfileDir = "AUTODIAG_BENCH_PROFILE_DIR"
