package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// Helpers of the SQS end-to-end tests: the real binary as a child process
// talks to an sqsfake server in this process (AWS_ENDPOINT_URL_SQS) and to
// the redis-server at AUTODIAG_TEST_REDIS_ADDR.

// sqsRedis returns a client of the test Redis and a key prefix no other
// test uses; the prefix's keys are deleted when tb ends.
func sqsRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	addr := testenv.RedisAddr(tb)
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s: %v", addr, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(tb.Name(), "-")
	prefix := "e2e:" + name + ":" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	})
	return c, prefix
}

// sqsFake is the harness's SQS fake with one task queue, stopped when the
// test ends.
type sqsFake struct {
	*harness.SQS
	srv    *sqsfake.Server
	client *sqs.Client
	name   string
	url    string
	env    []string // for the child: AWS_ENDPOINT_URL_SQS
}

func newSQSFake(tb testing.TB, name string, opts ...sqsfake.Option) *sqsFake {
	tb.Helper()
	s, err := harness.StartSQS(nil, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	url, err := s.CreateQueue(name, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &sqsFake{SQS: s, srv: s.Server, client: s.Client, name: name, url: url, env: s.Env()}
}

// send puts bodies on the queue, 10 per SendMessageBatch, and returns the
// message ids in order.
func (f *sqsFake) send(tb testing.TB, bodies ...string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := f.Send(ctx, f.url, bodies...)
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// stats returns the queue's counts.
func (f *sqsFake) stats(tb testing.TB) (visible, inFlight, delayed int, st sqsfake.QueueStats) {
	tb.Helper()
	visible, inFlight, delayed, st, ok := f.srv.Stats(f.name)
	if !ok {
		tb.Fatalf("queue %s gone", f.name)
	}
	return visible, inFlight, delayed, st
}

// drained reports whether every message sent so far was deleted.
func (f *sqsFake) drained(tb testing.TB) bool {
	tb.Helper()
	f.stats(tb) // fails the test when the queue is gone
	return f.Drained(f.name)
}

// sqsTaskBody is a task message for host web-1.
func sqsTaskBody(id, diagnostic string) string { return harness.TaskBody(id, diagnostic) }

// sqsLedger is the harness's ledger, its failures failing the test: every
// diagnostic of a test catalog appends a line to it (its task id, or "NAME
// HOST" for the alert catalog), one line per execution, so executions can
// be counted; the gate is a file diagnostics may wait for.
type sqsLedger struct{ *harness.Ledger }

// newSQSLedger writes harness.MarkScript: /bin/sh SCRIPT ID [secs|gate]
// appends ID to the ledger, then sleeps secs, or waits for the gate file
// (see open).
func newSQSLedger(tb testing.TB) *sqsLedger {
	tb.Helper()
	return newLedger(tb, "mark.sh", harness.MarkScript)
}

// newLedger writes the script name into a fresh directory from script, a
// format given the ledger's path (%[1]s) and the gate's (%[2]s).
func newLedger(tb testing.TB, name, script string) *sqsLedger {
	tb.Helper()
	l, err := harness.NewLedger(tb.TempDir(), name, script)
	if err != nil {
		tb.Fatal(err)
	}
	// A diagnostic waiting at the gate must not outlive the test, even when
	// its agent was killed.
	tb.Cleanup(l.Open)
	return &sqsLedger{l}
}

// open lets every diagnostic waiting at the gate finish.
func (l *sqsLedger) open() { l.Open() }

// counts returns how many times each line (task id, or "NAME HOST") was
// written.
func (l *sqsLedger) counts(tb testing.TB) map[string]int {
	tb.Helper()
	n, _, err := l.Counts()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// sqsAgentConfig is the tests' shorthand for the harness.AgentConfig of one
// agent on the fake queue; its catalog is the harness's (noop, and over
// the ledger mark, short, slow, long, longer, gate, param).
type sqsAgentConfig struct {
	instance   string
	workers    int
	queueURL   string
	dlqURL     string
	visibility time.Duration
	redisAddr  string // "" = in-memory state
	prefix     string
	// redisTimeout is redis.timeout; 0 = 2s.
	redisTimeout time.Duration
	ledger       *sqsLedger
	logLevel     string
}

func (c sqsAgentConfig) yaml() string {
	var led *harness.Ledger
	if c.ledger != nil {
		led = c.ledger.Ledger
	}
	return harness.AgentConfig{Instance: c.instance, Workers: c.workers, QueueURL: c.queueURL, DLQURL: c.dlqURL,
		Visibility: c.visibility, RedisAddr: c.redisAddr, Prefix: c.prefix, RedisTimeout: c.redisTimeout,
		Ledger: led, LogLevel: c.logLevel}.YAML()
}

// sqsWriteConfig writes yaml to a file for the CLI's --config.
func sqsWriteConfig(tb testing.TB, yaml string) string {
	tb.Helper()
	p, err := harness.WriteFile(tb.TempDir(), "config.yaml", yaml, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// awsEnv is the environment of a CLI child that talks to the fake.
func (f *sqsFake) awsEnv() []string {
	return append([]string{"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true"}, f.env...)
}

// sqsOutcomes returns the agent's outcome counters from /v1/status.
func sqsOutcomes(p *proc) map[string]int {
	p.t.Helper()
	return harness.OutcomeCounts(p.status())
}

// sqsMetric returns the value of an unlabelled series in /metrics, 0 when absent.
func sqsMetric(p *proc, name string) float64 {
	p.t.Helper()
	return harness.Series(p.metrics(), name, "")
}

// sqsKill9 sends SIGKILL and waits for the process to be gone.
func sqsKill9(p *proc) {
	p.t.Helper()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.Done()
}

// sqsTaskRecord reads autodiag:task:{id} under prefix.
func sqsTaskRecord(tb testing.TB, c *redis.Client, prefix, id string) (state.TaskRecord, bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, ok, err := state.NewRedis(c, state.RedisOptions{Prefix: prefix}).Task(ctx, id)
	if err != nil {
		tb.Fatal(err)
	}
	return rec, ok
}

// sqsDrainAll sends SIGTERM to every agent at once and expects each to
// drain and exit 0.
func sqsDrainAll(tb testing.TB, agents ...*proc) {
	tb.Helper()
	for _, a := range agents {
		a.signal(syscall.SIGTERM)
	}
	for _, a := range agents {
		if code := a.wait(30 * time.Second); code != 0 {
			tb.Errorf("agent pid %d: exit code %d after SIGTERM", a.Pid(), code)
		}
	}
}

// sqsNoneInFlight checks that Redis holds no in-flight task for any of the
// instances.
func sqsNoneInFlight(tb testing.TB, rc *redis.Client, prefix string, instances ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	store := state.NewRedis(rc, state.RedisOptions{Prefix: prefix})
	for _, inst := range instances {
		if left, err := store.Inflight(ctx, inst); err != nil || len(left) != 0 {
			tb.Errorf("in flight on %s: %v %v", inst, left, err)
		}
	}
}

// sqsTakeoverLab starts the scene of a lease takeover: two agents sharing
// one Redis and one queue, task k-1 (the gate diagnostic, held until the
// ledger opens) running on agent-a as attempt 1, and agent-b polling
// beside it.
func sqsTakeoverLab(t *testing.T) (rc *redis.Client, prefix string, fq *sqsFake, led *sqsLedger, a, b *proc) {
	t.Helper()
	rc, prefix = sqsRedis(t)
	fq = newSQSFake(t, "tasks")
	led = newSQSLedger(t)
	cfg := func(inst string) string {
		return sqsAgentConfig{instance: inst, workers: 2, queueURL: fq.url, visibility: 2 * time.Second,
			redisAddr: testenv.RedisAddr(t), prefix: prefix, ledger: led}.yaml()
	}
	a = startProc(t, cfg("agent-a"), fq.env...)
	fq.send(t, sqsTaskBody("k-1", "gate"))
	eventually(t, 20*time.Second, "k-1 running on agent-a", func() bool { return led.counts(t)["k-1"] == 1 })
	if rec, _ := sqsTaskRecord(t, rc, prefix, "k-1"); rec.Owner != "agent-a" || rec.Status != state.StatusRunning || rec.Attempts != 1 {
		t.Fatalf("record with k-1 running = %+v, want running on agent-a, attempt 1", rec)
	}
	b = startProc(t, cfg("agent-b"), fq.env...)
	return rc, prefix, fq, led, a, b
}
