package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/internal/harness"
)

// The fair peer of BenchmarkSQSIntake: sdk-loop-state16 is what a user
// would write by hand to get the agent's guarantees from SQS, Redis and a
// forked diagnostic, run as a child process like the agent so that the
// two are measured the same way (CPU of the process itself, of the
// diagnostics it forks, of the test process with the SQS fake, of
// redis-server).
//
// The child is this test binary, started with statePeerEnv set: init runs
// the peer and exits before the tests (and TestMain's build) start.

// statePeerEnv names the environment variable that makes this test binary
// the peer; its value is the number of loops.
const statePeerEnv = "AUTODIAG_BENCH_STATE_PEER"

func init() {
	if v := os.Getenv(statePeerEnv); v != "" {
		os.Exit(runStatePeer(v))
	}
}

// runStatePeer runs the loops until SIGTERM; its configuration comes from
// the environment (see startStatePeer). It logs "ready" on stderr, as the
// agent does, once its clients are made.
func runStatePeer(loops string) int {
	n, err := strconv.Atoi(loops)
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "%s=%q: want a number of loops\n", statePeerEnv, loops)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	p := statePeer{
		sqs:    sqs.NewFromConfig(sqsfake.SDKConfig(os.Getenv("AWS_ENDPOINT_URL_SQS"))),
		rdb:    redis.NewClient(&redis.Options{Addr: os.Getenv("PEER_REDIS_ADDR")}),
		url:    os.Getenv("PEER_QUEUE_URL"),
		prefix: os.Getenv("PEER_PREFIX"),
		owner:  "peer-" + strconv.Itoa(os.Getpid()),
	}
	defer p.rdb.Close()
	if err := p.rdb.Ping(ctx).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "peer: redis:", err)
		return 1
	}
	if d := os.Getenv(benchProfileDir); d != "" {
		// A profile beside the agent's (scripts/bench-intake PROFILE=dir),
		// to compare where each spends its CPU.
		stopProf, err := startCPUProfile(filepath.Join(d, fmt.Sprintf("peer-state%d-%d.pprof", n, time.Now().UnixNano())))
		if err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			return 1
		}
		defer stopProf()
	}
	fmt.Fprintln(os.Stderr, `{"msg":"ready"}`)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if err := p.loop(ctx); err != nil && ctx.Err() == nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	code := 0
	for err := range errs {
		fmt.Fprintln(os.Stderr, `{"level":"ERROR","msg":"peer loop","err":`+strconv.Quote(err.Error())+`}`)
		code = 1
	}
	return code
}

// statePeer holds what the loops share.
type statePeer struct {
	sqs                *sqs.Client
	rdb                *redis.Client
	url, prefix, owner string
}

// peerTask is the part of a task message the peer reads.
type peerTask struct {
	ID         string `json:"id"`
	Host       string `json:"host"`
	Diagnostic string `json:"diagnostic"`
}

// loop is one worker: receive up to 10, take each message's task to its
// end, delete the batch.
func (p *statePeer) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		out, err := p.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(p.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		var entries []types.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			done, err := p.handle(ctx, m)
			if err != nil {
				return err
			}
			if done {
				entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
		}
		if len(entries) > 0 {
			if _, err := p.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(p.url), Entries: entries}); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
		}
	}
	return nil
}

// handle takes one task to its end: lease (SET NX with expiry), record
// (HSET), audit entry (XADD), the diagnostic with its output captured
// and a timeout, result (HSET), lease given back (DEL). false: the task
// is someone else's now, so its message stays.
func (p *statePeer) handle(ctx context.Context, m types.Message) (bool, error) {
	var t peerTask
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &t); err != nil || t.ID == "" {
		return true, nil // not a task: nothing to run, drop it
	}
	lease, rec := p.prefix+"peer:lease:"+t.ID, p.prefix+"peer:task:"+t.ID
	ok, err := p.rdb.SetNX(ctx, lease, p.owner, time.Minute).Result()
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", t.ID, err)
	}
	if !ok {
		return false, nil
	}
	started := time.Now()
	if err := p.rdb.HSet(ctx, rec, "status", "running", "owner", p.owner, "host", t.Host, "diagnostic", t.Diagnostic,
		"started_at", started.UTC().Format(time.RFC3339Nano), "receive_count", m.Attributes["ApproximateReceiveCount"]).Err(); err != nil {
		return false, fmt.Errorf("record %s: %w", t.ID, err)
	}
	if err := p.rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.prefix + "peer:audit", MaxLen: 10000, Approx: true,
		Values: []any{"task_id", t.ID, "host", t.Host, "diagnostic", t.Diagnostic, "event", "started", "owner", p.owner}}).Err(); err != nil {
		return false, fmt.Errorf("audit %s: %w", t.ID, err)
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(runCtx, "/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	cancel()
	status, code := "succeeded", 0
	if runErr != nil {
		status, code = "failed", cmd.ProcessState.ExitCode()
	}
	if err := p.rdb.HSet(ctx, rec, "status", status, "exit_code", code, "finished_at", time.Now().UTC().Format(time.RFC3339Nano),
		"duration_seconds", time.Since(started).Seconds(), "output", stdout.String(), "stderr", stderr.String()).Err(); err != nil {
		return false, fmt.Errorf("result %s: %w", t.ID, err)
	}
	if err := p.rdb.Del(ctx, lease).Err(); err != nil {
		return false, fmt.Errorf("lease %s: %w", t.ID, err)
	}
	return true, nil
}

// benchProc is a child of the bench (the agent or the peer), ready.
type benchProc struct {
	cmd  *exec.Cmd
	stop func() // SIGTERM, then wait for the exit
}

// startStatePeer runs the peer with loops loops on fq and the Redis at
// addr, its keys under prefix.
func startStatePeer(b *testing.B, fq *sqsFake, loops int, addr, prefix string) *benchProc {
	b.Helper()
	cmd := exec.CommandContext(b.Context(), os.Args[0])
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir(), statePeerEnv + "=" + strconv.Itoa(loops),
		"PEER_QUEUE_URL=" + fq.url, "PEER_REDIS_ADDR=" + addr, "PEER_PREFIX=" + prefix}, fq.awsEnv()...)
	if dir := os.Getenv(benchProfileDir); dir != "" {
		cmd.Env = append(cmd.Env, benchProfileDir+"="+dir)
	}
	return startBenchProc(b, cmd)
}

// startBenchProc starts cmd, waits for its "ready" log line and returns
// it with a stop func that sends SIGTERM and waits for its exit; the
// child's warnings and errors are logged then. Its stderr goes to a file,
// read for the ready line and again at the end, so that this process
// spends nothing per log line while it measures.
func startBenchProc(b *testing.B, cmd *exec.Cmd) *benchProc {
	b.Helper()
	a, err := harness.StartLogged(cmd, filepath.Join(b.TempDir(), "stderr.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.KillTree)
	if _, err := a.AwaitLog("ready", 30*time.Second); err != nil {
		b.Fatalf("%s: %v", cmd.Path, err)
	}
	stop := func() {
		_ = a.Signal(syscall.SIGTERM)
		<-a.Done()
		if err := a.Err(); err != nil {
			b.Errorf("%s exit: %v", cmd.Path, err)
		}
		var tail []string
		for _, line := range strings.Split(a.Output(), "\n") {
			if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
				tail = append(tail, line)
			}
		}
		if len(tail) > 0 {
			b.Logf("%s warnings (%d):\n%s", cmd.Path, len(tail), strings.Join(tail[:min(len(tail), 20)], "\n"))
		}
	}
	return &benchProc{cmd: cmd, stop: stop}
}

// cpuSplit is where the CPU time of a child's run goes, from its ready
// line to the drained queue: the child itself (own), the diagnostics it
// forked and waited for, this process (the SQS fake, the bench's polls)
// and redis-server.
type cpuSplit struct {
	pid                     int
	own, diag, self, redisS time.Duration
	rc                      *redis.Client
}

func startSplit(b *testing.B, pid int, rc *redis.Client) *cpuSplit {
	s := &cpuSplit{pid: pid, rc: rc}
	s.own, s.diag = procCPU(b, pid)
	s.self = rusage(b, syscall.RUSAGE_SELF)
	if rc != nil {
		s.redisS = time.Duration(redisCPU(b, rc) * float64(time.Second))
	}
	return s
}

// report reports the CPU time since startSplit, per task: own-us/task
// (the child's own: the agent without its diagnostics), diag-us/task,
// test-us/task and, with a Redis client, redis-us/task. Call it before the
// child is stopped.
func (s *cpuSplit) report(b *testing.B) {
	own, diag := procCPU(b, s.pid)
	self := rusage(b, syscall.RUSAGE_SELF)
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(per(own-s.own), "own-us/task")
	b.ReportMetric(per(diag-s.diag), "diag-us/task")
	b.ReportMetric(per(self-s.self), "test-us/task")
	if s.rc != nil {
		b.ReportMetric(per(time.Duration(redisCPU(b, s.rc)*float64(time.Second))-s.redisS), "redis-us/task")
	}
}

// procCPU is a live child's CPU time (user + system) and that of its
// children it has waited for, from /proc/PID/stat (clock ticks, 100 Hz
// on Linux: 10ms, 5µs a task over 2000 tasks).
func procCPU(b *testing.B, pid int) (own, children time.Duration) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after its closing parenthesis, where field 3 (state) is the first.
	i := bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[i+1:]))
	tick := func(n int) time.Duration {
		v, err := strconv.ParseInt(f[n-3], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat field %d: %v", pid, n, err)
		}
		return time.Duration(v) * 10 * time.Millisecond
	}
	return tick(14) + tick(15), tick(16) + tick(17)
}
