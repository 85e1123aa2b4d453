package state

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisAudit is the capped audit stream (P audit or its shards).
type RedisAudit struct{ *client }

// Audit implements AuditLog.
func (r *RedisAudit) Audit(ctx context.Context, e AuditEntry) error {
	return wait0(ctx, r, "audit", e.TaskID, func(ctx context.Context) error {
		if e.Time.IsZero() {
			e.Time = r.o.Clock.Now()
		}
		js, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("state: audit: %w", err)
		}
		err = r.c.XAdd(ctx, &redis.XAddArgs{
			Stream: r.k.audit(e.TaskID),
			MaxLen: r.k.auditCap(),
			Approx: true,
			Values: []any{"e", js},
		}).Err()
		if err != nil {
			return fmt.Errorf("state: audit: %w", err)
		}
		return nil
	})
}

// RecentAudit implements AuditLog. With AuditShards > 1 it reads the newest
// n of every shard in one pipeline and merges them by the entries' time
// (then stream id), newest first.
func (r *RedisAudit) RecentAudit(ctx context.Context, n int) ([]AuditEntry, error) {
	return wait(ctx, r, "recent audit", "", func(ctx context.Context) ([]AuditEntry, error) {
		if n <= 0 {
			return nil, nil
		}
		if r.o.AuditShards <= 1 {
			msgs, err := r.c.XRevRangeN(ctx, r.k.auditShard(0), "+", "-", int64(n)).Result()
			if err != nil {
				return nil, fmt.Errorf("state: recent audit: %w", err)
			}
			out := make([]AuditEntry, 0, len(msgs))
			return decodeAudit(out, msgs)
		}
		cmds := make([]*redis.XMessageSliceCmd, r.o.AuditShards)
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range cmds {
				cmds[i] = p.XRevRangeN(ctx, r.k.auditShard(i), "+", "-", int64(n))
			}
			return nil
		})
		type shardEntry struct {
			e  AuditEntry
			id string // its stream id
		}
		var all []shardEntry
		for _, c := range cmds {
			msgs, err := c.Result()
			if err != nil {
				return nil, fmt.Errorf("state: recent audit: %w", err)
			}
			es, err := decodeAudit(make([]AuditEntry, 0, len(msgs)), msgs)
			if err != nil {
				return nil, err
			}
			for i, e := range es {
				all = append(all, shardEntry{e, msgs[i].ID})
			}
		}
		slices.SortFunc(all, func(a, b shardEntry) int {
			if c := b.e.Time.Compare(a.e.Time); c != 0 {
				return c
			}
			return compareStreamIDs(b.id, a.id)
		})
		merged := make([]AuditEntry, 0, min(n, len(all)))
		for _, se := range all[:min(n, len(all))] {
			merged = append(merged, se.e)
		}
		return merged, nil
	})
}

// decodeAudit appends the entries of msgs to out.
func decodeAudit(out []AuditEntry, msgs []redis.XMessage) ([]AuditEntry, error) {
	for _, m := range msgs {
		s, _ := m.Values["e"].(string)
		var e AuditEntry
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return out, fmt.Errorf("state: recent audit: entry %s: %w", m.ID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// compareStreamIDs orders two stream ids (ms-seq) by time.
func compareStreamIDs(a, b string) int {
	split := func(id string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseUint(ms, 10, 64)
		q, _ := strconv.ParseUint(seq, 10, 64)
		return m, q
	}
	am, aq := split(a)
	bm, bq := split(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(aq, bq)
}
