-- claim.lua: take the execution lease of one task, atomically with its record.
-- Both keys share the hash tag {<task id>} so this is one slot on Redis Cluster.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
--          fields: rec (TaskRecord JSON), status, owner, attempts, lease_until (unix ms)
-- KEYS[2]  execution lease    <prefix>lease:{<id>}  (value: owner, PX: lease)
-- ARGV[1]  owner (instance id)
-- ARGV[2]  now, unix ms, from the store's clock
-- ARGV[3]  lease length, ms
-- ARGV[4]  TaskRecord JSON to store when claimed
-- ARGV[5]  TTL of the record while running, ms
-- KEYS[3]  optional: the owner's in-flight hash <prefix>inflight:<owner>,
--          only where one node holds every key (a standalone server); then
-- ARGV[6]  the task id, ARGV[7] its in-flight entry (JSON), ARGV[8] the
--          hash's TTL, ms: written only when the task is claimed
--
-- The lease is live while the lease key holds the running owner AND
-- lease_until > now: the key bounds it in real time (SET PX), the stored
-- deadline lets the caller's clock (a fake one in tests) decide.
--
-- Returns
--   {0, attempts}                                claimed
--   {1, remaining_ms, rec, owner, attempts}      held elsewhere
--   {2, rec, owner, attempts}                    already done
local now = tonumber(ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'status', 'rec', 'owner', 'attempts', 'lease_until')
local status, rec, owner, attempts = v[1], v[2], v[3], tonumber(v[4]) or 0

if status == 'done' then
  return {2, rec or '', owner or '', attempts}
end

if status == 'running' and owner ~= ARGV[1] then
  local untilms = tonumber(v[5]) or 0
  if untilms > now and redis.call('GET', KEYS[2]) == owner then
    local remaining = untilms - now
    local pttl = redis.call('PTTL', KEYS[2])
    if pttl >= 0 and pttl < remaining then
      remaining = pttl
    end
    return {1, remaining, rec or '', owner, attempts}
  end
end

attempts = attempts + 1
redis.call('HSET', KEYS[1], 'status', 'running', 'owner', ARGV[1], 'attempts', attempts,
  'lease_until', now + tonumber(ARGV[3]), 'rec', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
if KEYS[3] then
  redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
  redis.call('PEXPIRE', KEYS[3], ARGV[8])
end
return {0, attempts}
