package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
)

// The record models compared by -mode records-hash and records-string:
// one task's claim and finish, server side only, with the same record
// JSON, in-flight entry and audit entry, on one server. records-hash is
// the agent's own scripts (state.RedisLeases.Claim, RedisRecords.Finish); records-string
// keeps the record as one string whose head carries the fields the
// scripts read ("status owner attempts lease_until finish\n" then the
// JSON), so that its TTL is set with the write (SET PX) instead of a
// PEXPIRE, and read with GET instead of HMGET. Neither the agent nor its
// rolling upgrades know the string model: it is here to price it.

// The store's record TTL and audit cap, given to it (run) and to the
// string model alike, so that both write the same TTLs and trims.
const (
	recordTTL   = 24 * time.Hour
	auditMaxLen = 10000
)

var stringClaim = redis.NewScript(`
local now = tonumber(ARGV[2])
local head = redis.call('GET', KEYS[1])
local status, owner, attempts, untilms
if head then
  status, owner, attempts, untilms = string.match(head, '^(%S+) (%S*) (%d+) (%d+)')
end
attempts = tonumber(attempts) or 0
if status == 'done' then
  return {2, head, owner, attempts}
end
if status == 'running' and owner ~= ARGV[1] then
  if tonumber(untilms) > now and redis.call('GET', KEYS[2]) == owner then
    return {1, tonumber(untilms) - now, head, owner, attempts}
  end
end
attempts = attempts + 1
redis.call('SET', KEYS[1], 'running ' .. ARGV[1] .. ' ' .. attempts .. ' ' .. (now + tonumber(ARGV[3])) .. ' -\n' .. ARGV[4], 'PX', ARGV[5])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
redis.call('PEXPIRE', KEYS[3], ARGV[8])
return {0, attempts}
`)

var stringFinish = redis.NewScript(`
local head = redis.call('GET', KEYS[1])
local status, prev, stored, untilms, fin
if head then
  status, prev, stored, untilms, fin = string.match(head, '^(%S+) (%S*) (%d+) (%d+) (%S+)')
end
prev, stored = prev or '', tonumber(stored) or 0
if ARGV[6] ~= '' and status == 'done' and fin == ARGV[6] then
  return {prev, stored, 0, 1}
end
redis.call('HDEL', KEYS[3], ARGV[7])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[9], '*', 'e', ARGV[10])
local attempts = tonumber(ARGV[3]) or 0
if attempts > 0 and stored > attempts then
  return {prev, stored, 1, 0}
end
local live = status == 'running' and prev == ARGV[2] and (tonumber(untilms) or 0) >= tonumber(ARGV[5])
local v = 'done ' .. ARGV[2] .. ' ' .. attempts .. ' 0 ' .. ARGV[6] .. '\n' .. ARGV[1]
if live then
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
else
  redis.call('SET', KEYS[1], v, 'PX', ARGV[4])
end
return {prev, attempts, 0, 0}
`)

// records runs one task's claim and finish in the model given.
func records(ctx context.Context, c *redis.Client, st state.Store, model, id, host string, lease time.Duration) error {
	rec := state.TaskRecord{ID: id, Host: host, Diagnostic: "quick"}
	if model == "hash" {
		cl, err := st.Claim(ctx, rec, "i-1", lease)
		if err != nil {
			return err
		}
		done := cl.Record
		done.Status = "succeeded"
		return st.Finish(ctx, done, state.FinishExtras{ID: state.NewFinishID(),
			Audit: &state.AuditEntry{TaskID: id, Outcome: "succeeded"}})
	}
	// The same payloads as the store sends (state.RedisLeases.claim, RedisRecords.Finish).
	now := time.Now()
	rec.Status, rec.Owner, rec.StartedAt = state.StatusRunning, "i-1", now
	js, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	entry, err := json.Marshal(state.InflightEntry{TaskID: id, Host: host, Diagnostic: "quick", StartedAt: now})
	if err != nil {
		return err
	}
	keys := []string{"redisrt:s:task:{" + id + "}", "redisrt:s:lease:{" + id + "}", "redisrt:s:inflight:i-1", "redisrt:s:audit"}
	running := (recordTTL + 4*lease).Milliseconds() // the store's TTL of a running record
	if err := stringClaim.Run(ctx, c, keys[:3], "i-1", now.UnixMilli(), lease.Milliseconds(), js,
		running, id, entry, recordTTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	rec.Status, rec.Attempts, rec.FinishedAt = "succeeded", 1, time.Now()
	if js, err = json.Marshal(rec); err != nil {
		return err
	}
	audit, err := json.Marshal(state.AuditEntry{TaskID: id, Outcome: "succeeded", Time: time.Now()})
	if err != nil {
		return err
	}
	if err := stringFinish.Run(ctx, c, keys, js, "i-1", 1, recordTTL.Milliseconds(), time.Now().UnixMilli(),
		state.NewFinishID(), id, "1", auditMaxLen, audit, 0).Err(); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return nil
}
