-- finish.lua: record a task's outcome as done and drop its lease.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
-- KEYS[2]  execution lease    <prefix>lease:{<id>}
-- ARGV[1]  TaskRecord JSON (the final record)
-- ARGV[2]  owner to record
-- ARGV[3]  attempts; 0 keeps the stored count
-- ARGV[4]  record TTL, ms
--
-- A finish never overwrites a later attempt: an agent whose lease lapsed
-- while it ran finishes after another agent claimed the task again. When the
-- stored attempts exceed ARGV[3] (or, with ARGV[3] 0, the task runs under
-- another owner) nothing is written and the lease is left alone.
--
-- Returns {previous owner or '', attempts, superseded (0|1)}; the caller
-- removes the task from the in-flight hashes of both owners (separate keys,
-- separate calls), or only from its own when superseded.
local v = redis.call('HMGET', KEYS[1], 'owner', 'attempts', 'status')
local prev, stored, status = v[1] or '', tonumber(v[2]) or 0, v[3]
local attempts = tonumber(ARGV[3]) or 0
if (attempts > 0 and stored > attempts) or
   (attempts == 0 and status == 'running' and prev ~= ARGV[2]) then
  return {prev, stored, 1}
end
if attempts == 0 then
  attempts = stored
end
redis.call('HSET', KEYS[1], 'status', 'done', 'owner', ARGV[2],
  'attempts', attempts, 'rec', ARGV[1])
redis.call('HDEL', KEYS[1], 'lease_until')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
return {prev, attempts, 0}
