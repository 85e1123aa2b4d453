-- release.lua: give an execution lease back without ending the task (Release,
-- and Recover after a restart). Only a task running under owner is touched.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
-- KEYS[2]  execution lease    <prefix>lease:{<id>}
-- ARGV[1]  owner
-- ARGV[2]  record TTL, ms
--
-- Returns {1, rec, attempts} when the task was marked interrupted, {0} when it
-- was not running under owner (finished, taken over, or unknown).
local v = redis.call('HMGET', KEYS[1], 'status', 'owner', 'rec', 'attempts')
if v[1] ~= 'running' or v[2] ~= ARGV[1] then
  return {0}
end
redis.call('HSET', KEYS[1], 'status', 'interrupted')
redis.call('HDEL', KEYS[1], 'lease_until')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2])
return {1, v[3] or '', tonumber(v[4]) or 0}
