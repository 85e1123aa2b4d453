package statetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/clock"
)

// Settings the store returned by the factory must be configured with.
const (
	// AuditCap is the audit stream cap (MemoryOptions.AuditMax,
	// RedisOptions.AuditMaxLen).
	AuditCap = 200
	// RecordTTL is the finished-record TTL (RecordTTL of either backend).
	RecordTTL = time.Hour
)

// lease is long in real time so a slow machine never expires a Redis lease
// key before the fake clock says so.
const lease = 2 * time.Minute

// Factory returns a fresh, empty store that reads time from clock and uses
// AuditCap and RecordTTL. It registers its own cleanup on t.
type Factory func(t *testing.T, clock *clock.Manual) state.Store

// Run runs the whole suite against the stores newStore returns.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s state.Store, c *clock.Manual)
	}{
		{"ClaimFresh", testClaimFresh},
		{"HeldElsewhere", testHeldElsewhere},
		{"SameOwnerReclaims", testSameOwnerReclaims},
		{"LeaseExpiry", testLeaseExpiry},
		{"Renew", testRenew},
		{"Finish", testFinish},
		{"FinishKeepsGivenAttempts", testFinishKeepsGivenAttempts},
		{"FinishAfterTakeover", testFinishAfterTakeover},
		{"FinishExtras", testFinishExtras},
		{"Release", testRelease},
		{"Recover", testRecover},
		{"KilledAgentAttempts", testKilledAgentAttempts},
		{"UnknownTask", testUnknownTask},
		{"Audit", testAudit},
		{"AuditCap", testAuditCap},
		{"Instances", testInstances},
		{"Drain", testDrain},
		{"ConcurrentClaims", testConcurrentClaims},
		{"MarkOnce", testMarkOnce},
		{"MarkOnceConcurrent", testMarkOnceConcurrent},
		{"RecordKeepsRequestAndResult", testRecordKeepsRequestAndResult},
		{"SetReport", testSetReport},
		{"InflightIDs", testInflightIDs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Millisecond precision: Redis stores lease deadlines in ms.
			c := clock.NewManual(time.Now().UTC().Truncate(time.Millisecond))
			s := newStore(t, c)
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			tc.fn(t, s, c)
		})
	}
}

func task(id string) state.TaskRecord {
	return state.TaskRecord{ID: id, Host: "web-01.example.com", Diagnostic: "disk-usage"}
}

func claim(t *testing.T, s state.Store, id, owner string) state.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), task(id), owner, lease)
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", id, owner, err)
	}
	return c
}

func mustClaimed(t *testing.T, s state.Store, id, owner string, attempts int) state.Claim {
	t.Helper()
	c := claim(t, s, id, owner)
	if c.Result != state.Claimed {
		t.Fatalf("Claim(%s, %s) = %v, want claimed", id, owner, c.Result)
	}
	if c.Record.Attempts != attempts || c.Record.Owner != owner || c.Record.Status != state.StatusRunning {
		t.Fatalf("Claim(%s, %s) record = attempts %d owner %q status %q, want %d %q running",
			id, owner, c.Record.Attempts, c.Record.Owner, c.Record.Status, attempts, owner)
	}
	return c
}

func mustTask(t *testing.T, s state.Store, id string) state.TaskRecord {
	t.Helper()
	rec, ok, err := s.Task(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("Task(%s) = ok %v, err %v", id, ok, err)
	}
	return rec
}

func inflightIDs(t *testing.T, s state.Store, inst string) []string {
	t.Helper()
	es, err := s.Inflight(context.Background(), inst)
	if err != nil {
		t.Fatalf("Inflight(%s): %v", inst, err)
	}
	var ids []string
	for _, e := range es {
		ids = append(ids, e.TaskID)
	}
	return ids
}

func equalIDs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testClaimFresh(t *testing.T, s state.Store, c *clock.Manual) {
	cl := mustClaimed(t, s, "t1", "a", 1)
	if !cl.Record.StartedAt.Equal(c.Now()) {
		t.Errorf("StartedAt = %v, want clock %v", cl.Record.StartedAt, c.Now())
	}
	rec := mustTask(t, s, "t1")
	if rec.Status != state.StatusRunning || rec.Owner != "a" || rec.Attempts != 1 ||
		rec.Host != "web-01.example.com" || rec.Diagnostic != "disk-usage" {
		t.Errorf("Task = %+v", rec)
	}
	es, err := s.Inflight(context.Background(), "a")
	if err != nil || len(es) != 1 {
		t.Fatalf("Inflight(a) = %v, %v; want one entry", es, err)
	}
	if e := es[0]; e.TaskID != "t1" || e.Host != "web-01.example.com" || e.Diagnostic != "disk-usage" || !e.StartedAt.Equal(c.Now()) {
		t.Errorf("Inflight entry = %+v", e)
	}
	if ids := inflightIDs(t, s, "b"); len(ids) != 0 {
		t.Errorf("Inflight(b) = %v, want none", ids)
	}
}

func testHeldElsewhere(t *testing.T, s state.Store, c *clock.Manual) {
	mustClaimed(t, s, "t1", "a", 1)
	cl := claim(t, s, "t1", "b")
	if cl.Result != state.HeldElsewhere {
		t.Fatalf("second owner: %v, want held_elsewhere", cl.Result)
	}
	if cl.LeaseRemaining <= 0 || cl.LeaseRemaining > lease {
		t.Errorf("LeaseRemaining = %v, want in (0, %v]", cl.LeaseRemaining, lease)
	}
	if cl.Record.Owner != "a" || cl.Record.Attempts != 1 {
		t.Errorf("held record = %+v, want owner a attempts 1", cl.Record)
	}
	c.Add(lease / 2)
	cl = claim(t, s, "t1", "b")
	if cl.Result != state.HeldElsewhere || cl.LeaseRemaining > lease/2 {
		t.Errorf("after half the lease: %v remaining %v, want held with <= %v", cl.Result, cl.LeaseRemaining, lease/2)
	}
	if ids := inflightIDs(t, s, "b"); len(ids) != 0 {
		t.Errorf("Inflight(b) = %v after a failed claim, want none", ids)
	}
	if rec := mustTask(t, s, "t1"); rec.Attempts != 1 || rec.Owner != "a" {
		t.Errorf("record after failed claims = %+v, want attempts 1 owner a", rec)
	}
}

func testSameOwnerReclaims(t *testing.T, s state.Store, _ *clock.Manual) {
	mustClaimed(t, s, "t1", "a", 1)
	mustClaimed(t, s, "t1", "a", 2)
	if ids := inflightIDs(t, s, "a"); !equalIDs(ids, []string{"t1"}) {
		t.Errorf("Inflight(a) = %v, want [t1]", ids)
	}
}

func testLeaseExpiry(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	mustClaimed(t, s, "t1", "a", 1)
	c.Add(lease + time.Millisecond)
	mustClaimed(t, s, "t1", "b", 2)
	if err := s.Renew(ctx, "t1", "a", lease); !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("Renew by the old owner = %v, want ErrLeaseLost", err)
	}
	if ids := inflightIDs(t, s, "a"); len(ids) != 0 {
		t.Errorf("Inflight(a) = %v after takeover, want none", ids)
	}
	if ids := inflightIDs(t, s, "b"); !equalIDs(ids, []string{"t1"}) {
		t.Errorf("Inflight(b) = %v, want [t1]", ids)
	}
	if cl := claim(t, s, "t1", "a"); cl.Result != state.HeldElsewhere {
		t.Errorf("old owner claims again: %v, want held_elsewhere", cl.Result)
	}
}

func testRenew(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	mustClaimed(t, s, "t1", "a", 1)
	c.Add(lease * 3 / 4)
	if err := s.Renew(ctx, "t1", "a", lease); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	c.Add(lease * 3 / 4) // past the first lease, inside the renewed one
	if cl := claim(t, s, "t1", "b"); cl.Result != state.HeldElsewhere {
		t.Errorf("after renew: %v, want held_elsewhere", cl.Result)
	}
	for _, tc := range []struct{ id, owner string }{{"t1", "b"}, {"nope", "a"}} {
		if err := s.Renew(ctx, tc.id, tc.owner, lease); !errors.Is(err, state.ErrLeaseLost) {
			t.Errorf("Renew(%s, %s) = %v, want ErrLeaseLost", tc.id, tc.owner, err)
		}
	}
}

func testFinish(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	cl := mustClaimed(t, s, "t1", "a", 1)
	rec := cl.Record
	rec.Attempts = 0 // keep the stored count
	rec.ExitCode = new(3)
	rec.Output = "out\n"
	rec.Outcome = "failed"
	rec.Reason = "exit status 3"
	c.Add(time.Second)
	if err := s.Finish(ctx, rec, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	got := mustTask(t, s, "t1")
	if got.Status != state.StatusDone || got.Attempts != 1 || got.ExitCode == nil || *got.ExitCode != 3 || got.Output != "out\n" ||
		got.Outcome != "failed" || got.Reason != "exit status 3" || !got.FinishedAt.Equal(c.Now()) ||
		!got.StartedAt.Equal(cl.Record.StartedAt) {
		t.Errorf("Task after Finish = %+v", got)
	}
	for _, owner := range []string{"a", "b"} {
		cl := claim(t, s, "t1", owner)
		if cl.Result != state.AlreadyDone || cl.Record.Outcome != "failed" || cl.Record.Attempts != 1 {
			t.Errorf("Claim by %s after Finish = %v %+v, want already_done with the record", owner, cl.Result, cl.Record)
		}
	}
	c.Add(lease * 2) // a finished task stays done past any lease
	if cl := claim(t, s, "t1", "b"); cl.Result != state.AlreadyDone {
		t.Errorf("Claim long after Finish = %v, want already_done", cl.Result)
	}
	if ids := inflightIDs(t, s, "a"); len(ids) != 0 {
		t.Errorf("Inflight(a) = %v after Finish, want none", ids)
	}
	if err := s.Renew(ctx, "t1", "a", lease); !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("Renew after Finish = %v, want ErrLeaseLost", err)
	}
}

func testFinishKeepsGivenAttempts(t *testing.T, s state.Store, _ *clock.Manual) {
	ctx := context.Background()
	// A task finished without a claim (e.g. rejected before running).
	if err := s.Finish(ctx, state.TaskRecord{ID: "t1", Owner: "a", Attempts: 0, Outcome: "rejected"}, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusDone || got.Outcome != "rejected" || got.Attempts != 0 {
		t.Errorf("unclaimed finish = %+v", got)
	}
	cl := mustClaimed(t, s, "t2", "a", 1)
	rec := cl.Record
	rec.Attempts = 5
	if err := s.Finish(ctx, rec, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := mustTask(t, s, "t2"); got.Attempts != 5 {
		t.Errorf("Attempts = %d, want the given 5", got.Attempts)
	}
}

// testFinishAfterTakeover: agent a's lease lapses while its diagnostic runs
// and b claims the task again. a's late Finish must neither overwrite b's
// record nor drop b's lease, whether b is still running or already done.
func testFinishAfterTakeover(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	ca := mustClaimed(t, s, "t1", "a", 1)
	c.Add(lease + time.Second)
	cb := mustClaimed(t, s, "t1", "b", 2)

	late := ca.Record
	late.Outcome = "failed"
	if err := s.Finish(ctx, late, state.FinishExtras{}); !errors.Is(err, state.ErrSuperseded) {
		t.Fatalf("Finish by a after takeover = %v, want ErrSuperseded", err)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusRunning || got.Owner != "b" || got.Attempts != 2 {
		t.Fatalf("record after a's late Finish = %+v, want running under b, attempts 2", got)
	}
	if err := s.Renew(ctx, "t1", "b", lease); err != nil {
		t.Fatalf("b's Renew after a's late Finish = %v; its lease must survive", err)
	}
	if cl := claim(t, s, "t1", "c"); cl.Result != state.HeldElsewhere {
		t.Fatalf("Claim by c while b runs = %v, want held elsewhere", cl.Result)
	}
	if ids := inflightIDs(t, s, "a"); len(ids) != 0 {
		t.Errorf("Inflight(a) = %v after its late Finish, want none", ids)
	}
	if ids := inflightIDs(t, s, "b"); !equalIDs(ids, []string{"t1"}) {
		t.Errorf("Inflight(b) = %v, want [t1]", ids)
	}
	// An attempt-less finish by a stranger does not end b's run either.
	if err := s.Finish(ctx, state.TaskRecord{ID: "t1", Owner: "a", Outcome: "failed"}, state.FinishExtras{}); !errors.Is(err, state.ErrSuperseded) {
		t.Fatalf("attempt-less Finish by a while b runs = %v, want ErrSuperseded", err)
	}

	done := cb.Record
	done.Outcome = "succeeded"
	if err := s.Finish(ctx, done, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish by b: %v", err)
	}
	if err := s.Finish(ctx, late, state.FinishExtras{}); !errors.Is(err, state.ErrSuperseded) {
		t.Fatalf("Finish by a after b finished = %v, want ErrSuperseded", err)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusDone || got.Owner != "b" || got.Attempts != 2 || got.Outcome != "succeeded" {
		t.Errorf("record = %+v, want b's succeeded attempt 2", got)
	}
}

func testRelease(t *testing.T, s state.Store, _ *clock.Manual) {
	ctx := context.Background()
	mustClaimed(t, s, "t1", "a", 1)
	if err := s.Release(ctx, "t1", "b"); err != nil {
		t.Fatalf("Release by a non-owner: %v", err)
	}
	if cl := claim(t, s, "t1", "b"); cl.Result != state.HeldElsewhere {
		t.Errorf("after a non-owner's Release: %v, want held_elsewhere", cl.Result)
	}
	if err := s.Release(ctx, "t1", "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusInterrupted || got.Attempts != 1 {
		t.Errorf("after Release = %+v, want interrupted, attempts 1", got)
	}
	if ids := inflightIDs(t, s, "a"); len(ids) != 0 {
		t.Errorf("Inflight(a) = %v after Release, want none", ids)
	}
	mustClaimed(t, s, "t1", "b", 2)
	if err := s.Release(ctx, "unknown", "a"); err != nil {
		t.Errorf("Release of an unknown task: %v", err)
	}
}

func testRecover(t *testing.T, s state.Store, _ *clock.Manual) {
	ctx := context.Background()
	mustClaimed(t, s, "t1", "a", 1)
	cl2 := mustClaimed(t, s, "t2", "a", 1)
	mustClaimed(t, s, "t3", "b", 1)
	if err := s.Finish(ctx, cl2.Record, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	recs, err := s.Recover(ctx, "a")
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(recs) != 1 || recs[0].ID != "t1" || recs[0].Status != state.StatusInterrupted || recs[0].Attempts != 1 {
		t.Fatalf("Recover(a) = %+v, want t1 interrupted with attempts 1", recs)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusInterrupted {
		t.Errorf("t1 = %+v, want interrupted", got)
	}
	if got := mustTask(t, s, "t2"); got.Status != state.StatusDone {
		t.Errorf("t2 = %+v, want done", got)
	}
	if got := mustTask(t, s, "t3"); got.Status != state.StatusRunning || got.Owner != "b" {
		t.Errorf("t3 = %+v, want running under b", got)
	}
	if ids := inflightIDs(t, s, "a"); len(ids) != 0 {
		t.Errorf("Inflight(a) = %v after Recover, want none", ids)
	}
	if ids := inflightIDs(t, s, "b"); !equalIDs(ids, []string{"t3"}) {
		t.Errorf("Inflight(b) = %v, want [t3]", ids)
	}
	// The lease is dropped: another agent takes the task at once.
	mustClaimed(t, s, "t1", "c", 2)
	if recs, err := s.Recover(ctx, "a"); err != nil || len(recs) != 0 {
		t.Errorf("second Recover(a) = %v, %v; want nothing", recs, err)
	}
}

// testKilledAgentAttempts: an agent killed with -9 mid-task never finishes or
// releases; after its lease lapses the next agent's claim is attempt 2, and
// the record ends succeeded with attempts=2.
func testKilledAgentAttempts(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	mustClaimed(t, s, "t1", "a", 1)
	if cl := claim(t, s, "t1", "b"); cl.Result != state.HeldElsewhere {
		t.Fatalf("while a's lease lives: %v, want held_elsewhere", cl.Result)
	}
	c.Add(lease + time.Second)
	cl := mustClaimed(t, s, "t1", "b", 2)
	rec := cl.Record
	rec.Outcome = "succeeded"
	if err := s.Finish(ctx, rec, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusDone || got.Outcome != "succeeded" || got.Attempts != 2 || got.Owner != "b" {
		t.Errorf("final record = %+v, want done succeeded attempts 2 owner b", got)
	}
	// Agent a restarts on its instance: nothing of its own is left running.
	if recs, err := s.Recover(ctx, "a"); err != nil || len(recs) != 0 {
		t.Errorf("Recover(a) = %v, %v; want nothing", recs, err)
	}
	if got := mustTask(t, s, "t1"); got.Status != state.StatusDone {
		t.Errorf("after Recover(a): %+v, want still done", got)
	}
}

func testUnknownTask(t *testing.T, s state.Store, _ *clock.Manual) {
	if _, ok, err := s.Task(context.Background(), "nope"); ok || err != nil {
		t.Errorf("Task(nope) = ok %v err %v, want not found", ok, err)
	}
}

// testFinishExtras: a Finish writes its audit entry always and its other
// writes only with the record; a superseded one writes the audit entry
// only; a retry of a finish that landed (same id) writes nothing again.
func testFinishExtras(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	applied := map[string]int{}
	extras := func(id, task, outcome string) state.FinishExtras {
		return state.FinishExtras{ID: id, Audit: &state.AuditEntry{InstanceID: "x", TaskID: task, Outcome: outcome},
			Writes: []state.Write{{Apply: func(context.Context) { applied[task+":"+outcome]++ }}}}
	}
	ca := mustClaimed(t, s, "t1", "a", 1)
	c.Add(lease + time.Second)
	cb := mustClaimed(t, s, "t1", "b", 2)

	late := ca.Record
	late.Outcome = "failed"
	if err := s.Finish(ctx, late, extras("fa", "t1", "failed")); !errors.Is(err, state.ErrSuperseded) {
		t.Fatalf("late Finish = %v, want ErrSuperseded", err)
	}
	done := cb.Record
	done.Outcome = "succeeded"
	for range 2 { // the second is a retry whose first try landed
		if err := s.Finish(ctx, done, extras("fb", "t1", "succeeded")); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	if want := map[string]int{"t1:succeeded": 1}; len(applied) != 1 || applied["t1:succeeded"] != 1 {
		t.Errorf("writes applied = %v, want %v: none for the superseded finish, one for the repeated one", applied, want)
	}
	got, err := s.RecentAudit(ctx, 10)
	if err != nil {
		t.Fatalf("RecentAudit: %v", err)
	}
	if len(got) != 2 || got[0].Outcome != "succeeded" || got[1].Outcome != "failed" || got[0].TaskID != "t1" {
		t.Errorf("audit = %+v, want the superseded run's failed and then succeeded, once each", got)
	}
	if !got[0].Time.Equal(c.Now()) {
		t.Errorf("audit time = %v, want the store's clock %v", got[0].Time, c.Now())
	}
	if ids := inflightIDs(t, s, "a"); len(ids) != 0 {
		t.Errorf("Inflight(a) = %v, want none", ids)
	}
	if ids := inflightIDs(t, s, "b"); len(ids) != 0 {
		t.Errorf("Inflight(b) = %v, want none", ids)
	}
	if rec := mustTask(t, s, "t1"); rec.Status != state.StatusDone || rec.Owner != "b" || rec.Outcome != "succeeded" {
		t.Errorf("record = %+v, want b's succeeded", rec)
	}
}

func testAudit(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	if got, err := s.RecentAudit(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("RecentAudit on empty = %v, %v", got, err)
	}
	at := c.Now().Add(-time.Minute)
	entries := []state.AuditEntry{
		{Time: at, InstanceID: "a", TaskID: "t1", Outcome: "succeeded"},
		{InstanceID: "a", TaskID: "t2", Host: "h", Diagnostic: "d", Outcome: "rate_limited", Reason: "daily",
			Fields: map[string]string{"rule": "heavy", "retry_after": "1h0m0s"}},
		{InstanceID: "b", TaskID: "t3", Outcome: "rejected"},
	}
	for _, e := range entries {
		if err := s.Audit(ctx, e); err != nil {
			t.Fatalf("Audit: %v", err)
		}
	}
	got, err := s.RecentAudit(ctx, 2)
	if err != nil {
		t.Fatalf("RecentAudit: %v", err)
	}
	if len(got) != 2 || got[0].TaskID != "t3" || got[1].TaskID != "t2" {
		t.Fatalf("RecentAudit(2) = %+v, want t3, t2", got)
	}
	if e := got[1]; !e.Time.Equal(c.Now()) || e.Fields["rule"] != "heavy" || e.Reason != "daily" || e.Host != "h" {
		t.Errorf("entry = %+v, want the clock's time and fields kept", e)
	}
	all, err := s.RecentAudit(ctx, 100)
	if err != nil || len(all) != 3 || !all[2].Time.Equal(at) {
		t.Errorf("RecentAudit(100) = %+v, %v; want 3 with the given time kept", all, err)
	}
}

func testAuditCap(t *testing.T, s state.Store, _ *clock.Manual) {
	ctx := context.Background()
	const written = AuditCap * 4
	for i := range written {
		if err := s.Audit(ctx, state.AuditEntry{TaskID: fmt.Sprint(i), Outcome: "succeeded"}); err != nil {
			t.Fatalf("Audit: %v", err)
		}
	}
	got, err := s.RecentAudit(ctx, written)
	if err != nil {
		t.Fatalf("RecentAudit: %v", err)
	}
	// Redis trims approximately (MAXLEN ~): whole stream nodes of up to 100
	// entries, so allow up to one node of slack beyond the cap.
	if len(got) < AuditCap || len(got) > AuditCap+100 {
		t.Errorf("audit holds %d entries after %d writes, want the cap %d (+ at most 100)", len(got), written, AuditCap)
	}
	if len(got) > 0 && got[0].TaskID != fmt.Sprint(written-1) {
		t.Errorf("newest = %s, want %d", got[0].TaskID, written-1)
	}
}

func testInstances(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	ids := func() []string {
		t.Helper()
		is, err := s.Instances(ctx)
		if err != nil {
			t.Fatalf("Instances: %v", err)
		}
		var out []string
		for _, i := range is {
			out = append(out, i.ID)
		}
		return out
	}
	start := c.Now()
	put := func(id string, ttl time.Duration) {
		t.Helper()
		if err := s.PutInstance(ctx, state.Instance{ID: id, State: "running", StartedAt: start, Version: "v1", Inflight: 2}, ttl); err != nil {
			t.Fatalf("PutInstance: %v", err)
		}
	}
	put("i-b", 90*time.Second)
	put("i-a", 30*time.Second)
	is, err := s.Instances(ctx)
	if err != nil || len(is) != 2 {
		t.Fatalf("Instances = %v, %v; want 2", is, err)
	}
	if a := is[0]; a.ID != "i-a" || a.State != "running" || a.Version != "v1" || a.Inflight != 2 ||
		!a.SeenAt.Equal(c.Now()) || !a.StartedAt.Equal(start) {
		t.Errorf("instance = %+v", a)
	}
	states := func() map[string]string {
		t.Helper()
		is, err := s.Instances(ctx)
		if err != nil {
			t.Fatalf("Instances: %v", err)
		}
		out := map[string]string{}
		for _, i := range is {
			out[i.ID] = i.State
		}
		return out
	}
	c.Add(60 * time.Second)
	if got := states(); len(got) != 2 || got["i-a"] != state.StateGone || got["i-b"] != "running" {
		t.Errorf("after 60s: %v, want i-a gone, i-b running", got)
	}
	put("i-a", 30*time.Second)
	if got := states(); len(got) != 2 || got["i-a"] != "running" || got["i-b"] != "running" {
		t.Errorf("after heartbeat: %v, want both running", got)
	}
	c.Add(2 * time.Minute)
	if got := states(); len(got) != 2 || got["i-a"] != state.StateGone || got["i-b"] != state.StateGone {
		t.Errorf("after both TTLs: %v, want both gone", got)
	}
	c.Add(state.GoneKeep)
	if got := ids(); len(got) != 0 {
		t.Errorf("GoneKeep after the last heartbeat: %v, want none", got)
	}
}

func testDrain(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	if d, err := s.LoadDrain(ctx, "i-a"); d != nil || err != nil {
		t.Fatalf("LoadDrain before save = %v, %v; want nil", d, err)
	}
	want := state.DrainRecord{
		Reason: "lifecycle", Source: "sqs", StartedAt: c.Now(), Deadline: c.Now().Add(10 * time.Minute),
		Action: []byte(`{"hook":"h","token":"t"}`),
	}
	if err := s.SaveDrain(ctx, "i-a", want); err != nil {
		t.Fatalf("SaveDrain: %v", err)
	}
	want.Completed = true
	if err := s.SaveDrain(ctx, "i-a", want); err != nil {
		t.Fatalf("SaveDrain: %v", err)
	}
	got, err := s.LoadDrain(ctx, "i-a")
	if err != nil || got == nil {
		t.Fatalf("LoadDrain = %v, %v", got, err)
	}
	if got.Reason != want.Reason || got.Source != want.Source || !got.StartedAt.Equal(want.StartedAt) ||
		!got.Deadline.Equal(want.Deadline) || string(got.Action) != string(want.Action) || !got.Completed {
		t.Errorf("LoadDrain = %+v, want %+v", got, want)
	}
	if d, err := s.LoadDrain(ctx, "i-b"); d != nil || err != nil {
		t.Errorf("LoadDrain(other) = %v, %v; want nil", d, err)
	}
}

// testConcurrentClaims: 8 goroutines race for the same ids many times, each
// claim under its own owner (a new agent per round); while the lease lives
// each id is claimed exactly once, and the record names the winner.
func testConcurrentClaims(t *testing.T, s state.Store, _ *clock.Manual) {
	const workers, ids, rounds = 8, 25, 4
	var (
		mu      sync.Mutex
		winners = map[string][]string{}
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				owner := fmt.Sprintf("agent-%d-%d", w, r)
				for i := range ids {
					id := fmt.Sprintf("t%d", (i+w*3+r)%ids)
					c, err := s.Claim(context.Background(), task(id), owner, lease)
					if err != nil {
						errs <- err
						return
					}
					switch c.Result {
					case state.Claimed:
						mu.Lock()
						winners[id] = append(winners[id], owner)
						mu.Unlock()
					case state.HeldElsewhere:
					default:
						errs <- fmt.Errorf("claim %s by %s: %v", id, owner, c.Result)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range ids {
		id := fmt.Sprintf("t%d", i)
		if len(winners[id]) != 1 {
			t.Errorf("%s claimed by %v, want exactly one owner", id, winners[id])
			continue
		}
		if rec := mustTask(t, s, id); rec.Attempts != 1 || rec.Owner != winners[id][0] {
			t.Errorf("%s record owner %s attempts %d, want %s 1", id, rec.Owner, rec.Attempts, winners[id][0])
		}
	}
}

// markTTL is short so that a Redis mark expires in real time within the
// test; the fake clock is advanced past it for the memory store.
const markTTL = 200 * time.Millisecond

func testMarkOnce(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	mark := func(key string) bool {
		t.Helper()
		first, err := s.MarkOnce(ctx, key, markTTL)
		if err != nil {
			t.Fatalf("MarkOnce(%s): %v", key, err)
		}
		return first
	}
	if !mark("rejected:m1") {
		t.Fatal("first MarkOnce(m1) = false, want true")
	}
	for range 3 {
		if mark("rejected:m1") {
			t.Fatal("repeated MarkOnce(m1) = true, want false while the mark lives")
		}
	}
	if !mark("rejected:m2") {
		t.Fatal("MarkOnce(m2) = false, want true: marks are per key")
	}
	// Past the TTL the mark is gone: the fake clock for memory, real time
	// (bounded by a deadline) for Redis, whose PX is its own clock.
	c.Add(markTTL + time.Millisecond)
	deadline := time.Now().Add(markTTL + 5*time.Second)
	for !mark("rejected:m1") {
		if time.Now().After(deadline) {
			t.Fatalf("MarkOnce(m1) still false %v past its TTL", markTTL+5*time.Second)
		}
		time.Sleep(markTTL / 10)
	}
}

func testMarkOnceConcurrent(t *testing.T, s state.Store, _ *clock.Manual) {
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for range n {
		wg.Go(func() {
			first, err := s.MarkOnce(context.Background(), "rejected:race", time.Hour)
			if err != nil {
				t.Errorf("MarkOnce: %v", err)
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("%d of %d concurrent MarkOnce calls were first, want exactly 1", firsts, n)
	}
}

// testRecordKeepsRequestAndResult: what the task asked for (written by the
// claim) and what explains its end (written by the finish) read back as
// written, for GET /v1/tasks/{id}.
func testRecordKeepsRequestAndResult(t *testing.T, s state.Store, c *clock.Manual) {
	ctx := context.Background()
	rec := task("full")
	rec.Params = map[string]string{"mount": "/var"}
	rec.Severity = "critical"
	rec.Alert = &taskview.Alert{Source: "alertmanager", Name: "DiskFull", EventID: "fp-1"}
	rec.ReceivedAt = c.Now().Add(-time.Second)
	cl, err := s.Claim(ctx, rec, "a", lease)
	if err != nil || cl.Result != state.Claimed {
		t.Fatalf("Claim = %v, %v", cl.Result, err)
	}
	running := mustTask(t, s, "full")
	if running.Params["mount"] != "/var" || running.Alert == nil || running.Alert.Name != "DiskFull" ||
		!running.ReceivedAt.Equal(rec.ReceivedAt) || running.Severity != "critical" {
		t.Fatalf("running record = %+v, want the claim's request fields", running)
	}
	fin := cl.Record
	fin.Outcome, fin.Reason = "rate_limited", "daily_exceeded"
	fin.Limiter = []byte(`{"rule":"r","limit":"daily"}`)
	fin.OutputURL = "s3://bucket/p/full.txt"
	fin.Report = []byte(`{"summary":"disk full"}`)
	if err := s.Finish(ctx, fin, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	got := mustTask(t, s, "full")
	if string(got.Limiter) != string(fin.Limiter) || string(got.Report) != string(fin.Report) || got.OutputURL != fin.OutputURL ||
		got.Params["mount"] != "/var" || got.Alert == nil || got.Alert.EventID != "fp-1" {
		t.Fatalf("finished record = %+v, want the finish's fields and the request's", got)
	}
}

// testSetReport: a report written after the finish reads back with the
// record, which keeps its outcome and output; no record, no write.
func testSetReport(t *testing.T, s state.Store, _ *clock.Manual) {
	ctx := context.Background()
	if ok, err := s.SetReport(ctx, "none", []byte(`{"status":"ok"}`)); err != nil || ok {
		t.Fatalf("SetReport(unknown) = %v, %v, want false, nil", ok, err)
	}
	if _, ok, _ := s.Task(ctx, "none"); ok {
		t.Fatal("SetReport created a record")
	}
	cl := mustClaimed(t, s, "rep", "a", 1)
	fin := cl.Record
	fin.Outcome, fin.Output = "failed", "disk full"
	fin.RanOn = &taskview.RanOn{InstanceID: "a", Hostname: "ip-10-0-1-5"}
	if err := s.Finish(ctx, fin, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	rep := []byte(`{"status":"ok","markdown":"**Root cause**: disk full"}`)
	if ok, err := s.SetReport(ctx, "rep", rep); err != nil || !ok {
		t.Fatalf("SetReport = %v, %v, want true, nil", ok, err)
	}
	got := mustTask(t, s, "rep")
	if string(got.Report) != string(rep) || got.Outcome != "failed" || got.Output != "disk full" || got.Status != state.StatusDone ||
		got.RanOn == nil || *got.RanOn != *fin.RanOn {
		t.Fatalf("record after SetReport = %+v, want the report and the finished record (ran_on too)", got)
	}
}

// testInflightIDs: the in-flight entries as the lease store lists them
// are the claimed, unfinished tasks of the owner, as Inflight lists them.
func testInflightIDs(t *testing.T, s state.Store, _ *clock.Manual) {
	ctx := context.Background()
	mustClaimed(t, s, "ids-1", "i-a", 1)
	mustClaimed(t, s, "ids-2", "i-a", 1)
	mustClaimed(t, s, "ids-3", "i-b", 1)
	rec := mustTask(t, s, "ids-2")
	rec.Outcome = "succeeded"
	if err := s.Finish(ctx, rec, state.FinishExtras{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	ids, err := s.InflightIDs(ctx, "i-a")
	if err != nil {
		t.Fatalf("InflightIDs: %v", err)
	}
	slices.Sort(ids)
	if want := []string{"ids-1"}; !equalIDs(ids, want) {
		t.Fatalf("InflightIDs(i-a) = %v, want %v", ids, want)
	}
	if entries := inflightIDs(t, s, "i-a"); !equalIDs(entries, ids) {
		t.Fatalf("Inflight(i-a) = %v, InflightIDs %v", entries, ids)
	}
}
