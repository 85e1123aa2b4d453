package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
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

// sqsFake is an sqsfake server on an httptest server with one task queue.
type sqsFake struct {
	srv    *sqsfake.Server
	client *sqs.Client
	name   string
	url    string
	env    []string // for the child: AWS_ENDPOINT_URL_SQS
}

func newSQSFake(tb testing.TB, name string, opts ...sqsfake.Option) *sqsFake {
	tb.Helper()
	srv, ts := sqsfake.NewTestServer(tb, opts...)
	url, err := srv.CreateQueue(name, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &sqsFake{
		srv:    srv,
		client: sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL)),
		name:   name,
		url:    url,
		env:    []string{"AWS_ENDPOINT_URL_SQS=" + ts.URL},
	}
}

// send puts bodies on the queue with SendMessageBatch, 10 at a time, and
// returns the message ids in order.
func (f *sqsFake) send(tb testing.TB, bodies ...string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for len(bodies) > 0 {
		n := min(10, len(bodies))
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, b := range bodies[:n] {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := f.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.url), Entries: entries})
		if err != nil {
			tb.Fatal(err)
		}
		if len(out.Failed) > 0 {
			tb.Fatalf("SendMessageBatch: %d entries failed: %+v", len(out.Failed), out.Failed)
		}
		got := make([]string, n)
		for _, e := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(e.Id))
			got[i] = aws.ToString(e.MessageId)
		}
		ids = append(ids, got...)
		bodies = bodies[n:]
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
	v, i, d, st := f.stats(tb)
	return v == 0 && i == 0 && d == 0 && st.Deleted == st.Sent
}

// sqsTaskBody is a task message for host web-1.
func sqsTaskBody(id, diagnostic string) string {
	return fmt.Sprintf(`{"id":%q,"host":"web-1","diagnostic":%q}`, id, diagnostic)
}

// sqsLedger is the file every diagnostic of a test catalog appends a line to
// (its task id, or "NAME HOST" for the alert catalog), one line per
// execution, so executions can be counted; gate is a file diagnostics may
// wait for.
type sqsLedger struct {
	dir    string
	path   string
	script string
	gate   string
}

// newSQSLedger writes the diagnostic script. It is run as
// /bin/sh SCRIPT ID [secs|gate]: it appends ID to the ledger, then sleeps
// secs, or waits for the gate file (see open). The script text is fixed
// test config; the task id only ever travels as an argv element.
func newSQSLedger(tb testing.TB) *sqsLedger {
	tb.Helper()
	return newLedger(tb, "mark.sh", `#!/bin/sh
printf '%%s\n' "$1" >> '%[1]s'
case "$2" in
'') ;;
gate) while [ ! -e '%[2]s' ]; do /bin/sleep 0.02; done ;;
*) exec /bin/sleep "$2" ;;
esac
`)
}

// newLedger writes the script name into a fresh directory from script, a
// format given the ledger's path (%[1]s) and the gate's (%[2]s).
func newLedger(tb testing.TB, name, script string) *sqsLedger {
	tb.Helper()
	dir := tb.TempDir()
	l := &sqsLedger{dir: dir, path: filepath.Join(dir, "ledger"), script: filepath.Join(dir, name), gate: filepath.Join(dir, "gate")}
	if err := os.WriteFile(l.script, fmt.Appendf(nil, script, l.path, l.gate), 0o644); err != nil {
		tb.Fatal(err)
	}
	// A diagnostic waiting at the gate must not outlive the test, even when
	// its agent was killed.
	tb.Cleanup(l.open)
	return l
}

// open lets every diagnostic waiting at the gate finish.
func (l *sqsLedger) open() { _ = os.WriteFile(l.gate, nil, 0o644) }

// counts returns how many times each line (task id, or "NAME HOST") was
// written.
func (l *sqsLedger) counts(tb testing.TB) map[string]int {
	tb.Helper()
	out := map[string]int{}
	f, err := os.Open(l.path)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out[sc.Text()]++
	}
	return out
}

// sqsAgentConfig is the YAML of one agent on the fake queue. The catalog:
// mark (append to the ledger), slow (then sleep 3s), long (then sleep 7s),
// longer (then sleep 10s), gate (then wait for the gate), noop (/bin/true).
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
	var b strings.Builder
	level := c.logLevel
	if level == "" {
		level = "info"
	}
	vis := c.visibility
	if vis == 0 {
		vis = 2 * time.Second
	}
	fmt.Fprintf(&b, "instance_id: %s\nadmin_addr: 127.0.0.1:0\nlog_level: %s\nworkers: %d\n", c.instance, level, c.workers)
	fmt.Fprintf(&b, "queue:\n  url: '%s'\n  wait_time: 2s\n  batch_size: 10\n  visibility_timeout: %s\n", c.queueURL, vis)
	if c.dlqURL != "" {
		fmt.Fprintf(&b, "  dlq_url: '%s'\n", c.dlqURL)
	}
	if c.redisAddr != "" {
		timeout := c.redisTimeout
		if timeout == 0 {
			timeout = 2 * time.Second
		}
		fmt.Fprintf(&b, "redis:\n  url: 'redis://%s/0'\n  prefix: '%s'\n  timeout: %s\n", c.redisAddr, c.prefix, timeout)
	}
	b.WriteString("diagnostics:\n  - name: noop\n    command: [/bin/true]\n")
	if c.ledger != nil {
		for _, d := range []struct{ name, arg string }{{"mark", ""}, {"slow", "3"}, {"long", "7"}, {"longer", "10"}, {"gate", "gate"}} {
			fmt.Fprintf(&b, "  - name: %s\n    command: [/bin/sh, '%s', '{id}'", d.name, c.ledger.script)
			if d.arg != "" {
				fmt.Fprintf(&b, ", '%s'", d.arg)
			}
			b.WriteString("]\n    timeout: 60s\n")
		}
	}
	b.WriteString("limiter:\n  hosts:\n    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']\n  rules: []\n")
	return b.String()
}

// sqsWriteConfig writes yaml to a file for the CLI's --config.
func sqsWriteConfig(tb testing.TB, yaml string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
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
	out := map[string]int{}
	o, _ := p.status()["outcomes"].(map[string]any)
	for k, v := range o {
		if n, ok := v.(float64); ok {
			out[k] = int(n)
		}
	}
	return out
}

// sqsMetric returns the value of an unlabelled series in /metrics, 0 when absent.
func sqsMetric(p *proc, name string) float64 {
	p.t.Helper()
	for _, line := range strings.Split(p.metrics(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// sqsKill9 sends SIGKILL and waits for the process to be gone.
func sqsKill9(p *proc) {
	p.t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
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
			tb.Errorf("agent pid %d: exit code %d after SIGTERM", a.cmd.Process.Pid, code)
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
