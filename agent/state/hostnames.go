package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// HostOwner is the live agent that answers for a host name: the agent of
// the machine a host-local diagnostic of that host must run on.
type HostOwner struct {
	ID string
	// State is the owner's Instance.State: running, draining, drained, or
	// a launch state (starting, warmed, abandoned).
	State string
	// Names are every name the owner answers for, its canonical one
	// first.
	Names []string
}

// AmbiguousHostError is HostOwner's answer for a name that more than one
// live agent claims: none of them may run its tasks.
type AmbiguousHostError struct {
	Name string
	IDs  []string
}

func (e *AmbiguousHostError) Error() string {
	return fmt.Sprintf("state: host name %s is claimed by more than one live agent (%s)", e.Name, strings.Join(e.IDs, ", "))
}

// HostNames finds the agent that owns a host name. Each agent's names
// ride in its instance record (Instance.Names) and live as long as its
// heartbeat.
type HostNames interface {
	// HostOwner returns the live agent that claims name; ok is false when
	// none does, err an *AmbiguousHostError when several do.
	HostOwner(ctx context.Context, name string) (owner HostOwner, ok bool, err error)
}

// HostOwner implements HostNames: the live members of the name's index
// (<prefix>hostname:NAME, scored by their heartbeat expiry like the
// instance index), then the one owner's record for its state: two
// commands, whatever the size of the fleet.
func (r *RedisPresence) HostOwner(ctx context.Context, name string) (HostOwner, bool, error) {
	type answer struct {
		o  HostOwner
		ok bool
	}
	a, err := wait(ctx, r, "host owner of", name, func(ctx context.Context) (answer, error) {
		now := strconv.FormatInt(r.o.Clock.Now().UnixMilli(), 10)
		ids, err := r.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: r.k.hostName(name), Start: "(" + now, Stop: "+inf", ByScore: true, Count: 3}).Result()
		if err != nil {
			return answer{}, fmt.Errorf("state: host owner of %s: %w", name, err)
		}
		switch len(ids) {
		case 0:
			return answer{}, nil
		case 1:
		default:
			slices.Sort(ids)
			return answer{}, &AmbiguousHostError{Name: name, IDs: ids}
		}
		o := HostOwner{ID: ids[0], State: InstanceInService}
		js, err := r.c.Get(ctx, r.k.instance(o.ID)).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return answer{}, fmt.Errorf("state: host owner of %s: %w", name, err)
		default:
			var inst Instance
			if json.Unmarshal([]byte(js), &inst) == nil {
				o.State, o.Names = inst.State, inst.Names
			}
		}
		return answer{o: o, ok: true}, nil
	})
	return a.o, a.ok, err
}

// putNames is PutInstance's part for the names: each name's index gets
// the instance with its heartbeat expiry (one ZADD per name per
// heartbeat); its lapsed members are removed and its TTL set with the
// instance index's trim (trim: once a minute per writer, and at its first
// write), as readers only count live members.
func (r *RedisPresence) putNames(ctx context.Context, p redis.Pipeliner, inst Instance, now time.Time, ttl time.Duration, trim bool) {
	for _, n := range inst.Names {
		key := r.k.hostName(n)
		p.ZAdd(ctx, key, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: inst.ID})
		if trim {
			p.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
			p.PExpire(ctx, key, ttl+GoneKeep)
		}
	}
}

// HostOwner implements HostNames over the instances this store holds
// (embedded mode: the agent itself).
func (m *MemoryPresence) HostOwner(_ context.Context, name string) (HostOwner, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	var found []Instance
	for _, i := range m.instances {
		if now.Before(i.expires) && slices.Contains(i.inst.Names, name) {
			found = append(found, i.inst)
		}
	}
	switch len(found) {
	case 0:
		return HostOwner{}, false, nil
	case 1:
		return HostOwner{ID: found[0].ID, State: found[0].State, Names: found[0].Names}, true, nil
	}
	ids := make([]string, len(found))
	for i, f := range found {
		ids[i] = f.ID
	}
	slices.Sort(ids)
	return HostOwner{}, false, &AmbiguousHostError{Name: name, IDs: ids}
}

// handTasksMaxLen bounds the tasks waiting for one agent: far more than
// its receive window takes between two reads. An entry trimmed past it
// is not lost: the queue's message is the task, and comes back when its
// visibility lapses.
const handTasksMaxLen = 10000

// GiveTask hands a task's message to instanceID's agent (stream
// <prefix>handtasks:INST, TTL ttl from this write): the agent that owns the
// task's host takes it from there (TakeTasks) and runs it as if it had
// received it. The queue's message stays the task's durable copy.
func (r *RedisHandoff) GiveTask(ctx context.Context, instanceID, body string, ttl time.Duration) error {
	return wait0(ctx, r, "give task to", instanceID, func(ctx context.Context) error {
		key := r.k.handTasks(instanceID)
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: handTasksMaxLen, Approx: true, Values: []any{"task", body}})
			p.PExpire(ctx, key, ttl)
			return nil
		})
		if err != nil {
			return fmt.Errorf("state: give task to %s: %w", instanceID, err)
		}
		return nil
	})
}

// TakeTasks returns up to count tasks handed to instanceID after the entry
// after ("" = from the first), oldest first, waiting up to block for one.
// They stay stored until ForgetTasks; a wait cut short by ctx returns
// nothing.
func (r *RedisHandoff) TakeTasks(ctx context.Context, instanceID, after string, count int, block time.Duration) ([]HandedNotice, error) {
	out, err := r.takeStream(ctx, &r.handTasks, r.k.handTasks(instanceID), "task", after, int64(count), block)
	if err != nil {
		return nil, fmt.Errorf("state: take tasks of %s: %w", instanceID, err)
	}
	return out, nil
}

// ForgetTasks drops the handed tasks ids of instanceID, once taken.
func (r *RedisHandoff) ForgetTasks(ctx context.Context, instanceID string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return wait0(ctx, r, "forget tasks of", instanceID, func(ctx context.Context) error {
		if err := r.c.XDel(ctx, r.k.handTasks(instanceID), ids...).Err(); err != nil {
			return fmt.Errorf("state: forget tasks of %s: %w", instanceID, err)
		}
		return nil
	})
}

// HostClaims returns, for each of names, the live agents that claim it
// (at most 3 each, sorted): one pipelined read per name, for an agent to
// learn which of its own names another live agent claims too.
func (r *RedisPresence) HostClaims(ctx context.Context, names []string) (map[string][]string, error) {
	return wait(ctx, r, "host claims", "", func(ctx context.Context) (map[string][]string, error) {
		now := strconv.FormatInt(r.o.Clock.Now().UnixMilli(), 10)
		cmds := make([]*redis.StringSliceCmd, len(names))
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, n := range names {
				cmds[i] = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: r.k.hostName(n), Start: "(" + now, Stop: "+inf", ByScore: true, Count: 3})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("state: host claims: %w", err)
		}
		out := make(map[string][]string, len(names))
		for i, n := range names {
			ids := cmds[i].Val()
			slices.Sort(ids)
			out[n] = ids
		}
		return out, nil
	})
}

// HostClaims implements the same over the instances this store holds.
func (m *MemoryPresence) HostClaims(_ context.Context, names []string) (map[string][]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	out := make(map[string][]string, len(names))
	for _, n := range names {
		var ids []string
		for id, i := range m.instances {
			if now.Before(i.expires) && slices.Contains(i.inst.Names, n) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		out[n] = ids
	}
	return out, nil
}
