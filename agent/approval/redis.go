package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/taskview"
)

// Keep is how long a parked task and its decision are kept after its
// deadline: SQS's longest message retention, so that a late delivery of
// its message still finds the decision.
const Keep = 14 * 24 * time.Hour

var (
	// parkScript: KEYS task, due, undecided; ARGV parked JSON, deadline
	// ms, ttl ms, id. Stores the task and puts it on the due set and the
	// undecided set at its deadline, unless it is parked already: then
	// nil when stored, else the stored JSON.
	parkScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
  return false
end
return redis.call('GET', KEYS[1])`)
	// decideScript: KEYS task, decision, due, undecided; ARGV decision
	// JSON, now ms, id. 0 = no such task; 1 = decided now (off the
	// undecided set); else the decision made before.
	decideScript = redis.NewScript(`
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return 0 end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ttl) then
  return redis.call('GET', KEYS[2])
end
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[3])
return 1`)
	// pendingScript: KEYS undecided; ARGV cutoff ms. Drops the ids whose
	// deadline is before the cutoff (their task expired undecided) and
	// counts the rest.
	pendingScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
return redis.call('ZCARD', KEYS[1])`)
	// dueScript: KEYS due; ARGV now ms, lease end ms, n. The ids due at
	// now, each made due again at the lease's end.
	dueScript = redis.NewScript(`
local ids = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
return ids`)
)

// redisClient is what Redis uses of go-redis.
type redisClient interface {
	redis.Scripter
	MGet(ctx context.Context, keys ...string) *redis.SliceCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	ZRangeArgs(ctx context.Context, z redis.ZRangeArgs) *redis.StringSliceCmd
}

// Redis is the Store of fleet mode: any agent decides, sweeps and sends
// on any parked task. Keys (hash tag {approvals}, so that each script's
// keys share a slot on a Cluster):
//
//	<prefix>{approvals}:task:<id>      the parked task (JSON), kept Keep past its deadline
//	<prefix>{approvals}:decision:<id>  its decision (JSON), set once, expiring with it
//	<prefix>{approvals}:due            sorted set: id → when it is due (ms), its
//	                                   deadline, or its decision until sent on
//	<prefix>{approvals}:undecided      sorted set: id → its deadline (ms), until decided
type Redis struct {
	c      redisClient
	prefix string
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store on c; prefix is redis.prefix.
func NewRedis(c redisClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix + "{approvals}:"}
}

func (r *Redis) taskKey(id string) string     { return r.prefix + "task:" + id }
func (r *Redis) decisionKey(id string) string { return r.prefix + "decision:" + id }
func (r *Redis) dueKey() string               { return r.prefix + "due" }
func (r *Redis) undecidedKey() string         { return r.prefix + "undecided" }

// Park implements Store.
func (r *Redis) Park(ctx context.Context, p Parked) (Parked, bool, error) {
	js, err := json.Marshal(p)
	if err != nil {
		return Parked{}, false, fmt.Errorf("approval: encode %s: %w", p.TaskID, err)
	}
	ttl := max(p.Approval.Deadline.Sub(p.Approval.RequestedAt), 0) + Keep
	_, err = parkScript.Run(ctx, r.c, []string{r.taskKey(p.TaskID), r.dueKey(), r.undecidedKey()},
		string(js), p.Approval.Deadline.UnixMilli(), ttl.Milliseconds(), p.TaskID).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return p, true, nil
	case err != nil:
		return Parked{}, false, fmt.Errorf("approval: park %s: %w", p.TaskID, err)
	}
	old, ok, err := r.Get(ctx, p.TaskID)
	if err != nil || !ok {
		return Parked{}, false, cmpErr(err, fmt.Errorf("approval: park %s: parked and gone", p.TaskID))
	}
	return old, false, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, id string) (Parked, bool, error) {
	vals, err := r.c.MGet(ctx, r.taskKey(id), r.decisionKey(id)).Result()
	if err != nil {
		return Parked{}, false, fmt.Errorf("approval: get %s: %w", id, err)
	}
	s, ok := vals[0].(string)
	if !ok {
		return Parked{}, false, nil
	}
	var p Parked
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return Parked{}, false, fmt.Errorf("approval: decode %s: %w", id, err)
	}
	if d, ok := vals[1].(string); ok {
		var a taskview.Approval
		if err := json.Unmarshal([]byte(d), &a); err != nil {
			return Parked{}, false, fmt.Errorf("approval: decode the decision of %s: %w", id, err)
		}
		p.Approval.Decision, p.Approval.By, p.Approval.Reason, p.Approval.Via, p.Approval.DecidedAt = a.Decision, a.By, a.Reason, a.Via, a.DecidedAt
	}
	return p, true, nil
}

// Decide implements Store.
func (r *Redis) Decide(ctx context.Context, id string, a taskview.Approval, now time.Time) (taskview.Approval, error) {
	js, err := json.Marshal(a)
	if err != nil {
		return taskview.Approval{}, fmt.Errorf("approval: encode: %w", err)
	}
	res, err := decideScript.Run(ctx, r.c, []string{r.taskKey(id), r.decisionKey(id), r.dueKey(), r.undecidedKey()}, string(js), now.UnixMilli(), id).Result()
	if err != nil {
		return taskview.Approval{}, fmt.Errorf("approval: decide %s: %w", id, err)
	}
	switch v := res.(type) {
	case int64:
		if v == 0 {
			return taskview.Approval{}, ErrUnknown
		}
		return a, nil
	case string:
		var old taskview.Approval
		if err := json.Unmarshal([]byte(v), &old); err != nil {
			return taskview.Approval{}, fmt.Errorf("approval: decode the decision of %s: %w", id, err)
		}
		return old, ErrDecided
	}
	return taskview.Approval{}, fmt.Errorf("approval: decide %s: unexpected reply %T", id, res)
}

// Due implements Store.
func (r *Redis) Due(ctx context.Context, now time.Time, lease time.Duration, n int) ([]string, error) {
	res, err := dueScript.Run(ctx, r.c, []string{r.dueKey()}, now.UnixMilli(), now.Add(lease).UnixMilli(), n).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("approval: due: %w", err)
	}
	return res, nil
}

// Sent implements Store.
func (r *Redis) Sent(ctx context.Context, id string) error {
	if err := r.c.ZRem(ctx, r.dueKey(), id).Err(); err != nil {
		return fmt.Errorf("approval: sent %s: %w", id, err)
	}
	return nil
}

// Waiting implements Store.
func (r *Redis) Waiting(ctx context.Context, n int) ([]string, error) {
	ids, err := r.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: r.dueKey(), Start: 0, Stop: n - 1}).Result()
	if err != nil {
		return nil, fmt.Errorf("approval: waiting: %w", err)
	}
	return ids, nil
}

// Pending implements Store: an id whose task expired undecided (Keep
// past its deadline) is dropped on the way.
func (r *Redis) Pending(ctx context.Context, now time.Time) (int64, error) {
	n, err := pendingScript.Run(ctx, r.c, []string{r.undecidedKey()}, now.Add(-Keep).UnixMilli()).Int64()
	if err != nil {
		return 0, fmt.Errorf("approval: pending: %w", err)
	}
	return n, nil
}
