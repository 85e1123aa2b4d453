-- finish.lua: record a task's outcome as done and drop its lease.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
-- KEYS[2]  execution lease    <prefix>lease:{<id>}
-- ARGV[1]  TaskRecord JSON (the final record)
-- ARGV[2]  owner to record
-- ARGV[3]  attempts; 0 keeps the stored count
-- ARGV[4]  record TTL, ms
--
-- Returns {previous owner or '', attempts}; the caller removes the task from
-- the in-flight hashes of both owners (separate keys, separate calls).
local prev = redis.call('HGET', KEYS[1], 'owner') or ''
local attempts = tonumber(ARGV[3]) or 0
if attempts == 0 then
  attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts')) or 0
end
redis.call('HSET', KEYS[1], 'status', 'done', 'owner', ARGV[2],
  'attempts', attempts, 'rec', ARGV[1])
redis.call('HDEL', KEYS[1], 'lease_until')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
return {prev, attempts}
