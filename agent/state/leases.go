package state

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisLeases takes, renews and gives back the execution leases of tasks,
// writing the running record with the lease in one script.
type RedisLeases struct{ *client }

func (r *RedisLeases) runningTTL(lease time.Duration) int64 {
	return ms(r.o.RecordTTL + 4*lease)
}

// Claim implements LeaseStore.
func (r *RedisLeases) Claim(ctx context.Context, rec TaskRecord, owner string, lease time.Duration) (Claim, error) {
	return wait(ctx, r, "claim", rec.ID, func(ctx context.Context) (Claim, error) {
		c, _, err := r.claim(ctx, rec, owner, lease, nil)
		return c, err
	})
}

// Then is a script of another component on the same Redis that runs in
// the claim's script, right after it and only when the claim succeeds
// (ClaimThen): its Lua source, run as a function with its own KEYS and
// ARGV, and those.
type Then struct {
	Source string
	Keys   []string
	Args   []any
}

// ClaimThen is Claim with then run in the same script, atomically after
// the lease is taken and only then: one round trip for both. folded is
// false, and nothing is sent, where one script cannot reach every key (a
// Cluster or Ring): make the two calls then. reply is then's reply, when
// the claim succeeded; nil when then failed with an error (make its call
// on its own then, which meets the error again and handles it).
func (r *RedisLeases) ClaimThen(ctx context.Context, rec TaskRecord, owner string, lease time.Duration, then Then) (c Claim, reply any, folded bool, err error) {
	if !r.oneNode {
		return Claim{}, nil, false, nil
	}
	type claimed struct {
		c     Claim
		reply any
	}
	v, err := wait(ctx, r, "claim", rec.ID, func(ctx context.Context) (claimed, error) {
		c, reply, err := r.claim(ctx, rec, owner, lease, &then)
		return claimed{c, reply}, err
	})
	return v.c, v.reply, true, err
}

// claimThenLua is claim.lua and the source of a Then as one script: KEYS
// and ARGV are the claim's, then then's; ARGV[1] and ARGV[2] give the
// claim's counts. The reply is claim.lua's, with then's reply appended
// when the claim succeeded and then ran without a Lua error (an error
// leaves the claim standing and then's reply out: what it wrote before
// the error stays, as with any script).
const claimThenLua = `local function claim(KEYS, ARGV)
%s
end
local function after(KEYS, ARGV)
%s
end
local nk, na = tonumber(ARGV[1]), tonumber(ARGV[2])
local ck, ca, ak, aa = {}, {}, {}, {}
for i = 1, nk do ck[i] = KEYS[i] end
for i = nk + 1, #KEYS do ak[#ak + 1] = KEYS[i] end
for i = 1, na do ca[i] = ARGV[2 + i] end
for i = 3 + na, #ARGV do aa[#aa + 1] = ARGV[i] end
local r = claim(ck, ca)
if r[1] == 0 then
  local ok, v = pcall(after, ak, aa)
  if ok then r[#r + 1] = v end
end
return r
`

// thenScripts caches the combined script of each Then source.
var thenScripts sync.Map // source -> *redis.Script

// ClaimThenHash is the SHA-1 by which Redis knows the script ClaimThen
// runs for a Then of source src: what a tool reading MONITOR or
// SCRIPT-level statistics names it by.
func ClaimThenHash(src string) string { return claimThenScript(src).Hash() }

func claimThenScript(src string) *redis.Script {
	if s, ok := thenScripts.Load(src); ok {
		return s.(*redis.Script)
	}
	s, _ := thenScripts.LoadOrStore(src, redis.NewScript(fmt.Sprintf(claimThenLua, claimLua, src)))
	return s.(*redis.Script)
}

func (r *RedisLeases) claim(ctx context.Context, rec TaskRecord, owner string, lease time.Duration, then *Then) (Claim, any, error) {
	now := r.o.Clock.Now()
	rec.Status = StatusRunning
	rec.Owner = owner
	if rec.StartedAt.IsZero() {
		rec.StartedAt = now
	}
	r.bound(&rec)
	js, err := json.Marshal(rec)
	if err != nil {
		return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
	}
	entry, err := json.Marshal(InflightEntry{TaskID: rec.ID, Host: rec.Host, Diagnostic: rec.Diagnostic, StartedAt: rec.StartedAt})
	if err != nil {
		return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
	}

	ifk := r.k.inflight(owner)
	keys := []string{r.k.task(rec.ID), r.k.lease(rec.ID)}
	args := []any{owner, now.UnixMilli(), ms(lease), js, r.runningTTL(lease)}
	var cmd *redis.Cmd
	if r.oneNode {
		// One node holds every key: the script writes the in-flight entry
		// with the claim, and only for a claim that succeeds; then, when
		// given, runs in the same script (ClaimThen gives it only here).
		keys, args = append(keys, ifk), append(args, rec.ID, entry, ms(r.o.RecordTTL))
		if then == nil {
			cmd = claimScript.Run(ctx, r.c, keys, args...)
		} else {
			all := make([]any, 0, 2+len(args)+len(then.Args))
			all = append(append(append(all, len(keys), len(args)), args...), then.Args...)
			cmd = claimThenScript(then.Source).Run(ctx, r.c, append(keys, then.Keys...), all...)
		}
	} else {
		// The in-flight entry goes first, in the same round trip as the
		// claim script: see the crash-window note on Redis.
		cmd, err = r.withScript(ctx, func(p redis.Pipeliner) {
			p.HSet(ctx, ifk, rec.ID, entry)
			p.PExpire(ctx, ifk, r.o.RecordTTL)
		}, claimScript, keys, args...)
		if err != nil {
			return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
		}
	}
	res, err := cmd.Slice()
	if err != nil {
		return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
	}
	code, _ := res[0].(int64)
	if code == 0 {
		attempts, _ := res[1].(int64)
		rec.Attempts = int(attempts)
		var reply any
		if then != nil && len(res) > 2 {
			reply = res[2]
		}
		return Claim{Result: Claimed, Record: rec}, reply, nil
	}

	// Not ours: the in-flight entry written above must go.
	if !r.oneNode {
		if err := r.c.HDel(ctx, ifk, rec.ID).Err(); err != nil {
			return Claim{}, nil, fmt.Errorf("state: claim %s: in-flight cleanup: %w", rec.ID, err)
		}
	}
	switch code {
	case 1:
		remaining, _ := res[1].(int64)
		js, _ := res[2].(string)
		holder, _ := res[3].(string)
		attempts, _ := res[4].(int64)
		got, err := decodeRecord(rec.ID, js, StatusRunning, holder, attempts)
		if err != nil {
			return Claim{}, nil, err
		}
		return Claim{Result: HeldElsewhere, Record: got, LeaseRemaining: time.Duration(remaining) * time.Millisecond}, nil, nil
	case 2:
		js, _ := res[1].(string)
		holder, _ := res[2].(string)
		attempts, _ := res[3].(int64)
		got, err := decodeRecord(rec.ID, js, StatusDone, holder, attempts)
		if err != nil {
			return Claim{}, nil, err
		}
		return Claim{Result: AlreadyDone, Record: got}, nil, nil
	}
	return Claim{}, nil, fmt.Errorf("state: claim %s: unexpected script reply %v", rec.ID, res)
}

// Renew implements LeaseStore.
func (r *RedisLeases) Renew(ctx context.Context, taskID, owner string, lease time.Duration) error {
	return wait0(ctx, r, "renew", taskID, func(ctx context.Context) error {
		n, err := renewScript.Run(ctx, r.c, []string{r.k.task(taskID), r.k.lease(taskID)},
			owner, r.o.Clock.Now().UnixMilli(), ms(lease), r.runningTTL(lease)).Int64()
		if err != nil {
			return fmt.Errorf("state: renew %s: %w", taskID, err)
		}
		if n == 0 {
			return ErrLeaseLost
		}
		return nil
	})
}

// release runs release.lua; ok reports whether the task was running under
// owner and is now interrupted.
func (r *RedisLeases) release(ctx context.Context, taskID, owner string) (TaskRecord, bool, error) {
	res, err := releaseScript.Run(ctx, r.c, []string{r.k.task(taskID), r.k.lease(taskID)},
		owner, ms(r.o.RecordTTL)).Slice()
	if err != nil {
		return TaskRecord{}, false, err
	}
	if code, _ := res[0].(int64); code != 1 {
		return TaskRecord{}, false, nil
	}
	js, _ := res[1].(string)
	attempts, _ := res[2].(int64)
	rec, err := decodeRecord(taskID, js, StatusInterrupted, owner, attempts)
	return rec, err == nil, err
}

// Release implements LeaseStore.
func (r *RedisLeases) Release(ctx context.Context, taskID, owner string) error {
	return wait0(ctx, r, "release", taskID, func(ctx context.Context) error {
		if _, _, err := r.release(ctx, taskID, owner); err != nil {
			return fmt.Errorf("state: release %s: %w", taskID, err)
		}
		// Whether or not the task was still ours, owner no longer runs it.
		if err := r.c.HDel(ctx, r.k.inflight(owner), taskID).Err(); err != nil {
			return fmt.Errorf("state: release %s: in-flight: %w", taskID, err)
		}
		return nil
	})
}

// InflightIDs lists the task ids in instanceID's in-flight hash as they
// are, unlike Inflight, which keeps only those still running under
// instanceID: an agent reconciling what its previous process left needs
// the entries of tasks that ended too.
func (r *RedisLeases) InflightIDs(ctx context.Context, instanceID string) ([]string, error) {
	return wait(ctx, r, "inflight", instanceID, func(ctx context.Context) ([]string, error) {
		ids, err := r.c.HKeys(ctx, r.k.inflight(instanceID)).Result()
		if err != nil {
			return nil, fmt.Errorf("state: inflight %s: %w", instanceID, err)
		}
		sort.Strings(ids)
		return ids, nil
	})
}

// Recover implements LeaseStore. It walks owner's in-flight hash; entries whose
// record is no longer running under owner (finished, taken over after lease
// expiry, or left by a crash inside Claim) are dropped without touching the
// record.
func (r *RedisLeases) Recover(ctx context.Context, owner string) ([]TaskRecord, error) {
	return wait(ctx, r, "recover", owner, func(ctx context.Context) ([]TaskRecord, error) {
		ifk := r.k.inflight(owner)
		ids, err := r.c.HKeys(ctx, ifk).Result()
		if err != nil {
			return nil, fmt.Errorf("state: recover %s: %w", owner, err)
		}
		var out []TaskRecord
		for _, id := range ids {
			rec, ok, err := r.release(ctx, id, owner)
			if err != nil {
				return out, fmt.Errorf("state: recover %s: task %s: %w", owner, id, err)
			}
			if ok {
				out = append(out, rec)
			}
			if err := r.c.HDel(ctx, ifk, id).Err(); err != nil {
				return out, fmt.Errorf("state: recover %s: in-flight: %w", owner, err)
			}
		}
		return out, nil
	})
}
