-- renew.lua: extend the execution lease if it is still the caller's.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
-- KEYS[2]  execution lease    <prefix>lease:{<id>}
-- ARGV[1]  owner
-- ARGV[2]  now, unix ms, from the store's clock
-- ARGV[3]  lease length, ms
-- ARGV[4]  TTL of the record while running, ms
--
-- Returns 1 when renewed, 0 when the task is not running under owner (the
-- lease was lost: another agent claimed it after expiry, or it ended).
local v = redis.call('HMGET', KEYS[1], 'status', 'owner')
if v[1] ~= 'running' or v[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'lease_until', tonumber(ARGV[2]) + tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return 1
