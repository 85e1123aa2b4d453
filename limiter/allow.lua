-- allow.lua: one limiter decision, atomically: dedupe, block, daily quota,
-- minimum interval, sliding window and leaky bucket of one rule for one key.
-- Quota is consumed only when every limit allows; a denial sets the sticky
-- block. With dry = 1 nothing is written (autodiag limits check).
--
-- KEYS: only the parts the decision uses, in this order, all with the same
-- hash tag {<limited key value>}:
--   dedupe  <prefix>lim:{tag}:dd:<host>:<diagnostic>:<event> value = until (µs), PX = dedupe ttl
--   block   <prefix>lim:{tag}:b:<rule>              value = until (µs), PX = block
--   daily   <prefix>lim:{tag}:d:<rule>:<YYYYMMDD>   counter, PX = until next local midnight
--   min     <prefix>lim:{tag}:mi:<rule>             value = last allowed run (µs), PX = interval
--   window  <prefix>lim:{tag}:w:<rule>              ZSET score = run time (µs), PX = per
--   rate    <prefix>lim:{tag}:r:<rule>              value = theoretical arrival time (µs), PX = until empty
--
-- ARGV[1]: 11 little-endian int64 (struct '<i8' each; times: Unix µs of the
-- caller's clock; durations: µs; 0 = the rule does not have that part):
--   dry (0|1), now, dedupe_ttl, block, daily_limit, daily_ttl (until the next
--   local midnight), min_interval, window_count, window_per,
--   rate_interval (per/count, rounded up), rate_capacity (count*burst)
-- ARGV[2]: order: limit codes d m w r in rule order ("-" none)
-- ARGV[3]: member: unique id of this decision (window ZSET member suffix)
--
-- String keys are read with one MGET, the window with ZCOUNT.
--
-- Returns 7 little-endian int64 (struct '<i8' each):
--   status (0 denied, 1 allowed, 2 duplicate), denying limit code (ASCII of
--   b d m w r, 0 none), retry_after µs, daily used, µs since last run (-1 none
--   within the interval), window count, bucket backlog µs.
-- Time is the caller's: expiry decisions compare stored times with ARGV now;
-- key TTLs only collect garbage.

local dry, now, ddttl, block, dlimit, dttl, mi, wcount, wper, rt, rcap =
  struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8', ARGV[1])
local order = ARGV[2]
local nows = string.format('%d', now)
local R = '<i8i8i8i8i8i8i8'

-- Map the keys present to their parts; read every string key in one MGET.
local n = 0
local kdd, kb, kd, kmi, kw, kr
local strs = {}
if ddttl > 0 then n = n + 1 kdd = KEYS[n] strs[#strs + 1] = kdd end
if block > 0 then n = n + 1 kb = KEYS[n] strs[#strs + 1] = kb end
if dlimit > 0 then n = n + 1 kd = KEYS[n] strs[#strs + 1] = kd end
if mi > 0 then n = n + 1 kmi = KEYS[n] strs[#strs + 1] = kmi end
if wcount > 0 then n = n + 1 kw = KEYS[n] end
if rt > 0 then n = n + 1 kr = KEYS[n] strs[#strs + 1] = kr end
local vals = {}
if #strs > 0 then vals = redis.call('MGET', unpack(strs)) end
local vi = 0
local vdd, vb, vd, vmi, vr
if kdd then vi = vi + 1 vdd = vals[vi] end
if kb then vi = vi + 1 vb = vals[vi] end
if kd then vi = vi + 1 vd = vals[vi] end
if kmi then vi = vi + 1 vmi = vals[vi] end
if kr then vi = vi + 1 vr = vals[vi] end

if vdd and tonumber(vdd) > now then return struct.pack(R, 2, 0, 0, 0, -1, 0, 0) end

local retry = 0
local blocked = false
local dd, dm, dw, dr = false, false, false, false
local used, since, wc, level = 0, -1, 0, 0

if vb then
  local t = tonumber(vb)
  if t > now then blocked = true retry = t - now end
end
if kd then
  if vd then used = tonumber(vd) end
  if used >= dlimit then dd = true if dttl > retry then retry = dttl end end
end
if vmi then
  local s = now - tonumber(vmi)
  if s < mi then
    since = s dm = true
    if mi - s > retry then retry = mi - s end
  end
end
local lo
if kw then
  lo = string.format('%d', now - wper)
  wc = redis.call('ZCOUNT', kw, '(' .. lo, '+inf')
  if wc >= wcount then
    dw = true
    local oldest = redis.call('ZRANGEBYSCORE', kw, '(' .. lo, '+inf', 'WITHSCORES', 'LIMIT', wc - wcount, 1)
    local r = tonumber(oldest[2]) + wper - now
    if r > retry then retry = r end
  end
end
local tat = now
if kr then
  if vr then tat = tonumber(vr) end
  if tat < now then tat = now end
  level = tat - now
  if level + rt > rt * rcap then
    dr = true
    local r = level + rt - rt * rcap
    if r > retry then retry = r end
  end
end

local limit = 0
if blocked then
  limit = 98 -- b
else
  for i = 1, #order do
    local c = string.byte(order, i)
    if (c == 100 and dd) or (c == 109 and dm) or (c == 119 and dw) or (c == 114 and dr) then
      limit = c
      break
    end
  end
end
local status = 0
if limit == 0 then status = 1 retry = 0 end

if dry == 0 then
  if kw then redis.call('ZREMRANGEBYSCORE', kw, '-inf', lo) end
  if status == 1 then
    if kd then
      used = used + 1
      redis.call('SET', kd, used, 'PX', math.ceil(dttl / 1000))
    end
    if kmi then redis.call('SET', kmi, nows, 'PX', math.ceil(mi / 1000)) end
    if kw then
      redis.call('ZADD', kw, nows, nows .. '-' .. ARGV[3])
      redis.call('PEXPIRE', kw, math.ceil(wper / 1000))
      wc = wc + 1
    end
    if kr then
      tat = tat + rt
      level = tat - now
      redis.call('SET', kr, string.format('%d', tat), 'PX', math.ceil(level / 1000))
    end
    if kdd then redis.call('SET', kdd, string.format('%d', now + ddttl), 'PX', math.ceil(ddttl / 1000)) end
  elseif kb and not blocked then
    redis.call('SET', kb, string.format('%d', now + block), 'PX', math.ceil(block / 1000))
    if block > retry then retry = block end
  end
end

return struct.pack(R, status, limit, retry, used, since, wc, level)
