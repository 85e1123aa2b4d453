-- allow.lua: one limiter decision, atomically: dedupe, block, daily quota,
-- minimum interval, sliding window and leaky bucket of one rule for one key.
-- Quota is consumed only when every limit allows; a denial sets the sticky
-- block. With dry = 1 nothing is written (autodiag limits check).
--
-- KEYS: only the ones the decision uses, in this order, with the same hash
-- tag {<limited key value>}:
--   dedupe  <prefix>lim:{tag}:dd:<host>:<diagnostic>:<event>  value = until (µs, decimal), PX = dedupe ttl
--   state   <prefix>lim:{tag}:s:<rule>  (when the rule has a limit or a block)
--   window  <prefix>lim:{tag}:w:<rule>  (window_zset = 1 only) ZSET score = run
--           time (µs), member = time-ARGV[3], PX = per
--
-- The state of one rule for one key is ONE string, so that a decision is a
-- GET (MGET with the dedupe key) and at most one SET (plus the window ZSET
-- commands when window_zset = 1): 5 little-endian int64
-- (struct '<i8' each; times are Unix µs of the callers' clocks, 0 = none)
--   block_until, day (local calendar day, YYYYMMDD), daily count of that
--   day, last allowed run, bucket theoretical arrival time
-- followed by the sliding window: the allowed runs still inside the window,
-- one '<i8' each, ascending, never more than window_count of them (an exact
-- sliding log), unless window_zset = 1: a window whose count is too large to
-- copy on every decision is the ZSET above (ZCOUNT, ZREMRANGEBYSCORE, ZADD,
-- PEXPIRE; trimmed each call, never more than count members). The SET's PX is the longest any part still needs: block,
-- next local midnight (daily count > 0), last run + min_interval, newest
-- window entry + per, bucket drain time. A daily count of another day than
-- ARGV's counts as 0, so the quota resets at local midnight whatever the TTL.
--
-- ARGV[1]: 13 little-endian int64 (struct '<i8' each; times: Unix µs of the
-- caller's clock; durations: µs; 0 = the rule does not have that part):
--   dry (0|1), now, dedupe_ttl, block, daily_limit, day (YYYYMMDD),
--   daily_ttl (until the next local midnight), min_interval, window_count,
--   window_per, rate_interval (per/count, rounded up), rate_capacity
--   (count*burst), window_zset (0|1)
-- ARGV[2]: order: limit codes d m w r in rule order ("-" none)
-- ARGV[3]: unique id of this decision (window ZSET member suffix)
--
-- Returns 7 little-endian int64 (struct '<i8' each):
--   status (0 denied, 1 allowed, 2 duplicate), denying limit code (ASCII of
--   b d m w r, 0 none), retry_after µs, daily used, µs since last run (-1 none
--   within the interval), window count, bucket backlog µs.
-- Time is the caller's: expiry decisions compare stored times with ARGV now;
-- key TTLs only collect garbage.

local dry, now, ddttl, block, dlimit, day, dttl, mi, wcount, wper, rt, rcap, wz =
  struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8i8i8', ARGV[1])
local R = '<i8i8i8i8i8i8i8'
local I = '<i8'

local kdd, ks, vdd, vs
if ddttl > 0 then
  kdd = KEYS[1]
  ks = KEYS[2]
  if ks then
    local v = redis.call('MGET', kdd, ks)
    vdd, vs = v[1], v[2]
  else
    vdd = redis.call('GET', kdd)
  end
  if vdd and tonumber(vdd) > now then return struct.pack(R, 2, 0, 0, 0, -1, 0, 0) end
else
  ks = KEYS[1]
  vs = redis.call('GET', ks)
end
local kw, wlog = nil, wcount > 0
if wz == 1 then kw = KEYS[#KEYS] wlog = false end

-- The window log is read in place: entry k (0-based) is at byte 41 + 8k of
-- vs, so that a decision copies it once, into the SET.
local bu, sday, used, last, tat = 0, 0, 0, 0, 0
local we = 0 -- entries in the log
if vs and #vs >= 40 then
  bu, sday, used, last, tat = struct.unpack('<i8i8i8i8i8', vs)
  we = (#vs - 40) / 8
else
  vs = ''
end
if sday ~= day then used = 0 end

local function at(k) return (struct.unpack(I, vs, 41 + 8 * k)) end
-- upto returns the first entry in [a, b) later than t (b if none).
local function upto(t, a, b)
  while a < b do
    local m = math.floor((a + b) / 2)
    if at(m) <= t then a = m + 1 else b = m end
  end
  return a
end

local retry = 0
local blocked = false
local dd, dm, dw, dr = false, false, false, false
local since, wc, level = -1, 0, 0

if bu > now then blocked = true retry = bu - now end
if dlimit > 0 and used >= dlimit then
  dd = true
  if dttl > retry then retry = dttl end
end
if mi > 0 and last ~= 0 then
  local s = now - last
  if s < mi then
    since = s dm = true
    if mi - s > retry then retry = mi - s end
  end
end
local ws = we -- first entry still in the window
local lo
if wlog then
  ws = upto(now - wper, 0, we)
  wc = we - ws
  if wc >= wcount then
    dw = true
    local r = at(we - wcount) + wper - now
    if r > retry then retry = r end
  end
elseif kw then
  lo = string.format('%d', now - wper)
  wc = redis.call('ZCOUNT', kw, '(' .. lo, '+inf')
  if wc >= wcount then
    dw = true
    local oldest = redis.call('ZRANGEBYSCORE', kw, '(' .. lo, '+inf', 'WITHSCORES', 'LIMIT', wc - wcount, 1)
    local r = tonumber(oldest[2]) + wper - now
    if r > retry then retry = r end
  end
end
if tat < now then tat = now end
if rt > 0 then
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
  local order = ARGV[2]
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

local write = false
if dry == 0 then
  if kw then
    redis.call('ZREMRANGEBYSCORE', kw, '-inf', lo)
    if wc > wcount then -- never more than count (after a lower count)
      redis.call('ZREMRANGEBYRANK', kw, 0, wc - wcount - 1)
    end
    if status == 1 then
      local nows = string.format('%d', now)
      redis.call('ZADD', kw, nows, nows .. '-' .. ARGV[3])
      redis.call('PEXPIRE', kw, math.ceil(wper / 1000))
    end
  end
  if status == 1 then
    write = true
    bu = 0
    if dlimit > 0 then used = used + 1 end
    if mi > 0 then last = now end
    if wcount > 0 then wc = wc + 1 end
    if rt > 0 then
      tat = tat + rt
      level = tat - now
    end
    if kdd then redis.call('SET', kdd, string.format('%d', now + ddttl), 'PX', math.ceil(ddttl / 1000)) end
  elseif block > 0 and not blocked then
    write = true
    bu = now + block
    if block > retry then retry = block end
  end
end

if write and ks then
  -- The new log: entries ws..we-1, with now inserted in order when allowed,
  -- as two pieces around the insertion point (b = '' when not inserted).
  local a, b, newest = '', '', 0
  if wlog then
    if status == 1 then
      local p = upto(now, ws, we)
      a = string.sub(vs, 41 + 8 * ws, 40 + 8 * p) .. struct.pack(I, now)
      if p < we then b = string.sub(vs, 41 + 8 * p) end
      newest = now
      if p < we then newest = at(we - 1) end
    elseif ws < we then
      a = string.sub(vs, 41 + 8 * ws)
      newest = at(we - 1)
    end
    if #a + #b > wcount * 8 then -- never more than count (after a lower count)
      a = string.sub(a .. b, #a + #b - wcount * 8 + 1)
      b = ''
    end
  end
  -- The key lives as long as its longest-lived part.
  local ttl = 0
  if bu > now then ttl = bu - now end
  if dlimit > 0 and used > 0 and dttl > ttl then ttl = dttl end
  if mi > 0 and last ~= 0 and last + mi - now > ttl then ttl = last + mi - now end
  if #a > 0 and newest + wper - now > ttl then ttl = newest + wper - now end
  if rt > 0 and tat - now > ttl then ttl = tat - now end
  if dlimit == 0 then used = 0 end
  if mi == 0 then last = 0 end
  if rt == 0 then tat = 0 end
  if ttl > 0 then -- else nothing in it matters any more (a window in a ZSET only)
    redis.call('SET', ks, struct.pack('<i8i8i8i8i8', bu, day, used, last, tat) .. a .. b, 'PX', math.ceil(ttl / 1000))
  end
end

if rt > 0 then level = tat - now else level = 0 end
if dlimit == 0 then used = 0 end
return struct.pack(R, status, limit, retry, used, since, wc, level)
