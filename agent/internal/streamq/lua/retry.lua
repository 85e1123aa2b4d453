-- Schedules a retry of entry ARGV[4] of stream KEYS[1], held by consumer
-- ARGV[2] of group ARGV[1]: its idle time set to the claim idle time
-- ARGV[3] (ms) by XCLAIM ... JUSTID, which does not count as a delivery,
-- and its due time ARGV[5] (ms) in the retry hash KEYS[2] — only when the
-- entry is still pending: one removed meanwhile (shed past the cap, taken
-- over and delivered) leaves no field behind in the hash.
-- Returns 1 when scheduled, 0 when the entry was gone.
local got = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[4], 'IDLE', ARGV[3], 'JUSTID')
if #got == 0 then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
return 1
