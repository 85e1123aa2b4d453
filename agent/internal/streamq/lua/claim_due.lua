-- Claims the pending entries ARGV[5..] of stream KEYS[1] for consumer
-- ARGV[2] of group ARGV[1], each only if it is still idle for ARGV[3] ms
-- (XCLAIM's min-idle) and its retry in hash KEYS[2], if any, is due at
-- ARGV[4] (ms). The check and the claim are one step: a holder's Retry,
-- which sets the entry's idle to the claim idle time and its retry time
-- together, can never fall between them, so a retry is never claimed
-- before it is due. A claimed entry's retry time is removed.
-- Returns the claimed entries as XCLAIM does ({id, {field, value, ...}});
-- an entry deleted meanwhile is left out.
local now = tonumber(ARGV[4])
local out = {}
for i = 5, #ARGV do
  local id = ARGV[i]
  local at = tonumber(redis.call('HGET', KEYS[2], id))
  if at == nil or at <= now then
    local got = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], id)
    if #got > 0 then
      redis.call('HDEL', KEYS[2], id)
      if got[1] then
        out[#out + 1] = got[1]
      end
    end
  end
end
return out
