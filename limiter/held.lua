-- held.lua: what a run holds, renewed with its lease or given back when it
-- ends, for each rule given (the rule that allowed the run, then shadow
-- rules): its concurrency slot and, when the run is the probe, the failure
-- breaker's probe; at the end, the run's outcome counts for the breaker.
--
-- KEYS, for each rule, those it has (same layout as allow.lua):
--   slots   <prefix>lim:{tag}:c:<rule>  ZSET task id -> lease expiry (µs)
--   breaker <prefix>lim:{tag}:f:<rule>  HASH o, p, pu, f (see allow.lua)
--
-- ARGV[1]: 5 little-endian int64: now (µs), mode (0 renew, 1 done),
--   outcome (0 succeeded, 1 failed or timed out, 2 neither: slots and the
--   probe are given back, the breaker counts nothing), lease_until (renew),
--   n (rules)
-- ARGV[2]: task id
-- ARGV[2+i], i = 1..n: 4 little-endian int64: concurrency (0|1),
--   breaker_failures, breaker_window (µs), breaker_open_for (µs)
--
-- Breaker: a failure of the probe reopens it for open_for; a success of
-- the probe closes it (the key is deleted); any other failure while it is
-- closed is logged (times within window, at most failures of them) and the
-- failures-th opens it. Failures of runs that end while it is open count
-- for nothing: the probe decides. An open breaker lives open_for (or
-- window, the longer) past the end of its open period; unprobed by then,
-- it is forgotten (closed).
--
-- Returns the number of slots and probes the task held (renewed or given back).

local now, mode, outcome, lease, n = struct.unpack('<i8i8i8i8i8', ARGV[1])
local task = ARGV[2]
local I = '<i8'
local ki = 1
local held = 0
local function ms(us) return math.max(1, math.ceil(us / 1000)) end

for i = 1, n do
  local conc, bf, bw, bo = struct.unpack('<i8i8i8i8', ARGV[2 + i])
  if conc > 0 then
    local kc = KEYS[ki] ki = ki + 1
    if mode == 0 then
      local s = tonumber(redis.call('ZSCORE', kc, task) or 0)
      if s > now then
        held = held + 1
        redis.call('ZADD', kc, string.format('%d', lease), task)
        -- The key holds this slot, so it has its TTL: GT (Redis 7.0) only
        -- raises it to this expiry; before 7.0, the latest score's.
        if not pcall(redis.call, 'PEXPIRE', kc, ms(lease - now), 'GT') then
          local last = redis.call('ZRANGE', kc, -1, -1, 'WITHSCORES')
          redis.call('PEXPIRE', kc, ms(tonumber(last[2]) - now))
        end
      end
    else
      held = held + redis.call('ZREM', kc, task)
    end
  end
  if bf > 0 then
    local kb = KEYS[ki] ki = ki + 1
    local keep = math.max(bo, bw)
    local b = redis.call('HMGET', kb, 'o', 'p', 'pu', 'f')
    local open = tonumber(b[1]) or 0
    local probe = b[2] == task and (tonumber(b[3]) or 0) > now
    if probe then held = held + 1 end
    if mode == 0 then
      if probe then
        redis.call('HSET', kb, 'pu', string.format('%d', lease))
        redis.call('PEXPIRE', kb, ms(lease - now + keep))
      end
    elseif b[2] == task then
      if outcome == 0 then
        redis.call('DEL', kb)
      elseif outcome == 1 then
        redis.call('HSET', kb, 'o', string.format('%d', now + bo), 'p', '', 'pu', '0', 'f', '')
        redis.call('PEXPIRE', kb, ms(bo + keep))
      else
        redis.call('HSET', kb, 'p', '', 'pu', '0')
      end
    elseif outcome == 1 and open == 0 then
      local f = b[4] or ''
      local kept = {}
      for k = 0, #f / 8 - 1 do
        local t = struct.unpack(I, f, 1 + 8 * k)
        if t > now - bw then kept[#kept + 1] = struct.pack(I, t) end
      end
      kept[#kept + 1] = struct.pack(I, now)
      if #kept >= bf then
        redis.call('HSET', kb, 'o', string.format('%d', now + bo), 'p', '', 'pu', '0', 'f', '')
        redis.call('PEXPIRE', kb, ms(bo + keep))
      else
        redis.call('HSET', kb, 'f', table.concat(kept))
        redis.call('PEXPIRE', kb, ms(bw))
      end
    end
  end
end
return held
