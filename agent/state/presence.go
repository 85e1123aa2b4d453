package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisPresence keeps each agent's instance record, the instance and
// in-service indexes, the host-name index and the persisted drains.
type RedisPresence struct {
	*client
	// trimDue is when PutInstance next trims the instance index (Unix ms
	// of the store's clock; 0 = at the next write).
	trimDue atomic.Int64
}

// indexTrimEvery spaces one writer's trims of the instance index: every
// agent writes its entry every few seconds, and the trim (two removals
// and the TTL) is housekeeping that any writer's pass does for all.
const indexTrimEvery = time.Minute

// PutInstance implements InstanceStore. It also refreshes the TTL of the instance's
// in-flight hash, so the heartbeat keeps it alive however long tasks run.
func (r *RedisPresence) PutInstance(ctx context.Context, inst Instance, ttl time.Duration) error {
	return wait0(ctx, r, "put instance", inst.ID, func(ctx context.Context) error {
		now := r.o.Clock.Now()
		inst.SeenAt = now
		js, err := json.Marshal(inst)
		if err != nil {
			return fmt.Errorf("state: put instance %s: %w", inst.ID, err)
		}
		idx := r.k.instances(inst.ID)
		due := r.trimDue.Load()
		trim := now.UnixMilli() >= due
		_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			// The record outlives the heartbeat by GoneKeep so a vanished
			// agent is listed as gone; the index score is the heartbeat expiry.
			p.Set(ctx, r.k.instance(inst.ID), js, time.Duration(ms(ttl+GoneKeep))*time.Millisecond)
			p.ZAdd(ctx, idx, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: inst.ID})
			if trim {
				// The index always holds the writer's own live entry, so it
				// is never emptied (and recreated without a TTL) between trims.
				p.ZRemRangeByScore(ctx, idx, "-inf", "("+strconv.FormatInt(now.Add(-GoneKeep).UnixMilli(), 10))
				p.ZRemRangeByRank(ctx, idx, 0, -r.k.indexCap()-1)
				p.PExpire(ctx, idx, max(r.o.RecordTTL, ttl+GoneKeep))
				// The in-flight hash's TTL, which every claim also refreshes,
				// rides with the trim: it outlasts the time to the next one.
				p.PExpire(ctx, r.k.inflight(inst.ID), max(r.o.RecordTTL, ttl+indexTrimEvery))
			}
			r.putNames(ctx, p, inst, now, ttl, trim)
			if r.o.InService != nil {
				for _, k := range r.o.InService(inst) {
					if inst.State == InstanceInService {
						p.ZAdd(ctx, k, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: inst.ID})
					} else {
						p.ZRem(ctx, k, inst.ID)
					}
					p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
					p.PExpire(ctx, k, max(r.o.RecordTTL, ttl))
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("state: put instance %s: %w", inst.ID, err)
		}
		if trim {
			r.trimDue.CompareAndSwap(due, now.Add(indexTrimEvery).UnixMilli())
		}
		return nil
	})
}

// Instances implements InstanceStore: ids from the index (every shard, in one
// pipeline) whose heartbeat expiry is within GoneKeep of now (those past
// it listed as gone), then their records (one pipelined GET each, so
// Cluster works).
func (r *RedisPresence) Instances(ctx context.Context) ([]Instance, error) {
	return wait(ctx, r, "instances", "", func(ctx context.Context) ([]Instance, error) {
		now := r.o.Clock.Now()
		shards := make([]*redis.ZSliceCmd, r.o.InstanceShards)
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range shards {
				shards[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
					Key: r.k.instancesShard(i), Start: "(" + strconv.FormatInt(now.Add(-GoneKeep).UnixMilli(), 10), Stop: "+inf", ByScore: true,
				})
			}
			return nil
		})
		var zs []redis.Z
		for _, c := range shards {
			z, err := c.Result()
			if err != nil {
				return nil, fmt.Errorf("state: instances: %w", err)
			}
			zs = append(zs, z...)
		}
		if len(zs) == 0 {
			return nil, nil
		}
		ids := make([]string, len(zs))
		gone := make([]bool, len(zs))
		for i, z := range zs {
			ids[i], _ = z.Member.(string)
			gone[i] = z.Score <= float64(now.UnixMilli())
		}
		cmds := make([]*redis.StringCmd, len(ids))
		if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.Get(ctx, r.k.instance(id))
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("state: instances: %w", err)
		}
		var out []Instance
		for i, c := range cmds {
			s, err := c.Result()
			if errors.Is(err, redis.Nil) {
				continue // expired in Redis time
			}
			if err != nil {
				return nil, fmt.Errorf("state: instances: %s: %w", ids[i], err)
			}
			var inst Instance
			if err := json.Unmarshal([]byte(s), &inst); err != nil {
				return nil, fmt.Errorf("state: instances: decode %s: %w", ids[i], err)
			}
			if gone[i] {
				inst.State = StateGone
			}
			out = append(out, inst)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, nil
	})
}

// Inflight implements InstanceStore: the in-flight hash, filtered by the task
// records (running under instanceID), oldest first.
func (r *RedisPresence) Inflight(ctx context.Context, instanceID string) ([]InflightEntry, error) {
	return wait(ctx, r, "inflight", instanceID, func(ctx context.Context) ([]InflightEntry, error) {
		m, err := r.c.HGetAll(ctx, r.k.inflight(instanceID)).Result()
		if err != nil {
			return nil, fmt.Errorf("state: inflight %s: %w", instanceID, err)
		}
		if len(m) == 0 {
			return nil, nil
		}
		ids := make([]string, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		cmds := make([]*redis.SliceCmd, len(ids))
		if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HMGet(ctx, r.k.task(id), "status", "owner")
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("state: inflight %s: %w", instanceID, err)
		}
		var out []InflightEntry
		for i, c := range cmds {
			v := c.Val()
			if len(v) < 2 || v[0] != StatusRunning || v[1] != instanceID {
				continue
			}
			var e InflightEntry
			if err := json.Unmarshal([]byte(m[ids[i]]), &e); err != nil {
				return nil, fmt.Errorf("state: inflight %s: decode %s: %w", instanceID, ids[i], err)
			}
			out = append(out, e)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
		return out, nil
	})
}

// SaveDrain implements DrainStore; the record outlives its deadline by RecordTTL.
func (r *RedisPresence) SaveDrain(ctx context.Context, instanceID string, d DrainRecord) error {
	return wait0(ctx, r, "save drain", instanceID, func(ctx context.Context) error {
		js, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("state: save drain %s: %w", instanceID, err)
		}
		ttl := r.o.RecordTTL
		if left := d.Deadline.Sub(r.o.Clock.Now()); left > 0 {
			ttl += left
		}
		if err := r.c.Set(ctx, r.k.drain(instanceID), js, ttl).Err(); err != nil {
			return fmt.Errorf("state: save drain %s: %w", instanceID, err)
		}
		return nil
	})
}

// LoadDrain implements DrainStore.
func (r *RedisPresence) LoadDrain(ctx context.Context, instanceID string) (*DrainRecord, error) {
	return wait(ctx, r, "load drain", instanceID, func(ctx context.Context) (*DrainRecord, error) {
		s, err := r.c.Get(ctx, r.k.drain(instanceID)).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("state: load drain %s: %w", instanceID, err)
		}
		var d DrainRecord
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			return nil, fmt.Errorf("state: load drain %s: %w", instanceID, err)
		}
		return &d, nil
	})
}

// Ping implements InstanceStore.
func (r *RedisPresence) Ping(ctx context.Context) error {
	return wait0(ctx, r, "ping", "", func(ctx context.Context) error {
		if err := r.c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("state: ping: %w", err)
		}
		return nil
	})
}
