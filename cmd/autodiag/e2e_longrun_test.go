package main

import (
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestSQSRunLongerThanRedisTimeout: a diagnostic that runs several times
// longer than redis.timeout (lowered to 1s; long runs 7s) ends with its
// record succeeded, no in-flight entry and its message deleted: every
// store call after the run is bounded afresh, not by a context created
// before it. redis.timeout is no lower than 1s because the record is read
// once, right after the run (a write the backlog retries later must not
// pass): each store call has to fit in it on a loaded runner, against the
// Redis that every package's tests share.
func TestSQSRunLongerThanRedisTimeout(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	cfg := harness.AgentConfig{Instance: "agent-a", Workers: 1, QueueURL: fq.url, RedisAddr: testenv.RedisAddr(t),
		Prefix: prefix, Ledger: led.Ledger, RedisTimeout: time.Second}
	a := startProc(t, cfg.YAML(), fq.env...)
	fq.send(t, sqsTaskBody("slow-1", "long"))
	eventually(t, 60*time.Second, "slow-1 ended", func() bool { return sqsOutcomes(a)["succeeded"] == 1 })
	eventually(t, 10*time.Second, "slow-1 deleted", func() bool { return fq.drained(t) })
	rec, ok := sqsTaskRecord(t, rc, prefix, "slow-1")
	if !ok || rec.Status != state.StatusDone || rec.Outcome != "succeeded" {
		t.Fatalf("record = %+v (found %v), want done and succeeded", rec, ok)
	}
	if ran := rec.FinishedAt.Sub(rec.StartedAt); ran < 6*cfg.RedisTimeout {
		t.Fatalf("task ran %v; the test needs it to outlast redis.timeout %v several times", ran, cfg.RedisTimeout)
	}
	sqsNoneInFlight(t, rc, prefix, "agent-a")
	sqsDrainAll(t, a)
}
