package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// TestRedisFinishRecordTTL: a record is kept at least RecordTTL past its
// finish, on a standalone server and on a Cluster. A finish within the
// owner's lease leaves the TTL its claim set (RecordTTL + 4 leases: no
// PEXPIRE); a finish after the lease lapsed, and the finish of a task
// never claimed (no record before it), set RecordTTL.
func TestRedisFinishRecordTTL(t *testing.T) {
	const recordTTL, lease = time.Hour, time.Minute
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t, c)
			clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk, RecordTTL: recordTTL})
			finish := func(id string, claim bool, after time.Duration) time.Duration {
				t.Helper()
				rec := state.TaskRecord{ID: id, Host: "h", Diagnostic: "d"}
				if claim {
					cl, err := s.Claim(ctx, rec, "i-1", lease)
					if err != nil || cl.Result != state.Claimed {
						t.Fatalf("claim %s: %+v %v", id, cl, err)
					}
					rec = cl.Record
				}
				clk.Add(after)
				rec.Outcome = "succeeded"
				if err := s.Finish(ctx, rec, state.FinishExtras{ID: state.NewFinishID()}); err != nil {
					t.Fatalf("finish %s: %v", id, err)
				}
				return c.PTTL(ctx, prefix+"task:{"+id+"}").Val()
			}
			// Within the lease: the claim's TTL stands (the Redis TTL runs
			// in real time; the store's clock only says the lease is live).
			if got := finish("live", true, 30*time.Second); got <= recordTTL+3*lease || got > recordTTL+4*lease {
				t.Errorf("finished within the lease: TTL %v, want the claim's, in (%v, %v]", got, recordTTL+3*lease, recordTTL+4*lease)
			}
			// The lease lapsed before the finish (no renew): RecordTTL.
			if got := finish("lapsed", true, 2*lease); got <= recordTTL-time.Minute || got > recordTTL {
				t.Errorf("finished after the lease: TTL %v, want %v", got, recordTTL)
			}
			// Never claimed: the finish makes the record, with RecordTTL.
			if got := finish("unclaimed", false, 0); got <= recordTTL-time.Minute || got > recordTTL {
				t.Errorf("finished unclaimed: TTL %v, want %v", got, recordTTL)
			}
		})
	}
}
