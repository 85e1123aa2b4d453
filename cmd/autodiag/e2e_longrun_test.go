package main

import (
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
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
	// Parallel: it waits on a 7 s task, on its own queue and Redis prefix.
	t.Parallel()
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	cfg := sqsAgentConfig{instance: "agent-a", workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t),
		prefix: prefix, ledger: led, redisTimeout: time.Second}
	a := startProc(t, cfg.yaml(), fq.env...)
	fq.send(t, sqsTaskBody("slow-1", "long"))
	eventually(t, 60*time.Second, "slow-1 ended", func() bool { return sqsOutcomes(a)["succeeded"] == 1 })
	eventually(t, 10*time.Second, "slow-1 deleted", func() bool { return fq.drained(t) })
	rec, ok := sqsTaskRecord(t, rc, prefix, "slow-1")
	if !ok || rec.Status != state.StatusDone || rec.Outcome != "succeeded" {
		t.Fatalf("record = %+v (found %v), want done and succeeded", rec, ok)
	}
	if ran := rec.FinishedAt.Sub(rec.StartedAt); ran < 6*cfg.redisTimeout {
		t.Fatalf("task ran %v; the test needs it to outlast redis.timeout %v several times", ran, cfg.redisTimeout)
	}
	sqsNoneInFlight(t, rc, prefix, "agent-a")
	sqsDrainAll(t, a)
}
