package state_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// TestRedisAuditShards: with AuditShards 4 every audit entry (Audit's and
// Finish's) goes to P audit:{n}, n the FNV-1a of its task id mod 4, none
// to P audit; RecentAudit merges the shards newest first.
func TestRedisAuditShards(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t, c)
			clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			const shards = 4
			s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk, AuditShards: shards})
			var ids []string
			for i := range 12 {
				id := fmt.Sprintf("t%d", i)
				ids = append(ids, id)
				clk.Add(time.Millisecond)
				if err := s.Audit(ctx, state.AuditEntry{InstanceID: "i-1", TaskID: id, Outcome: "succeeded"}); err != nil {
					t.Fatal(err)
				}
			}
			clk.Add(time.Millisecond)
			cl, err := s.Claim(ctx, state.TaskRecord{ID: "t12", Host: "h"}, "i-1", time.Minute)
			if err != nil || cl.Result != state.Claimed {
				t.Fatalf("claim: %+v %v", cl, err)
			}
			rec := cl.Record
			rec.Outcome = "failed"
			if err := s.Finish(ctx, rec, state.FinishExtras{ID: state.NewFinishID(),
				Audit: &state.AuditEntry{InstanceID: "i-1", TaskID: "t12", Outcome: "failed"}}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, "t12")
			if n, err := c.Exists(ctx, prefix+"audit").Result(); err != nil || n != 0 {
				t.Errorf("%saudit exists (%d, %v), want no single stream", prefix, n, err)
			}
			used := map[int]bool{}
			for _, id := range ids {
				h := fnv.New32a()
				h.Write([]byte(id))
				n := int(h.Sum32() % shards)
				used[n] = true
				key := fmt.Sprintf("%saudit:{%d}", prefix, n)
				msgs, err := c.XRange(ctx, key, "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, m := range msgs {
					var e state.AuditEntry
					if s, _ := m.Values["e"].(string); json.Unmarshal([]byte(s), &e) == nil && e.TaskID == id {
						found = true
					}
				}
				if !found {
					t.Errorf("entry of %s not in %s", id, key)
				}
			}
			if len(used) < 2 {
				t.Fatalf("the ids fell in %d shard(s): the test needs them spread", len(used))
			}
			got, err := s.RecentAudit(ctx, 5)
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs []string
			for _, e := range got {
				gotIDs = append(gotIDs, e.TaskID)
			}
			if want := []string{"t12", "t11", "t10", "t9", "t8"}; fmt.Sprint(gotIDs) != fmt.Sprint(want) {
				t.Errorf("RecentAudit(5) = %v, want %v", gotIDs, want)
			}
			if all, err := s.RecentAudit(ctx, 100); err != nil || len(all) != len(ids) {
				t.Errorf("RecentAudit(100): %d entries (%v), want %d", len(all), err, len(ids))
			}
		})
	}
}
