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
-- ARGV[1]: space-separated fields (times: Unix µs of the caller's clock;
-- durations: µs; 0 = the rule does not have that part):
--   1 dry  2 now  3 dedupe_ttl  4 block  5 daily_limit  6 daily_ttl
--   7 min_interval  8 window_count  9 window_per  10 rate_interval (per/count)
--   11 rate_capacity (count*burst)  12 order (limit codes d m w r in rule order, "-" none)
--   13 member (unique id of this decision, for the window ZSET)
--
-- Returns a string of space-separated integers (one bulk reply, cheap to parse):
--   status (0 denied, 1 allowed, 2 duplicate), denying limit code (ASCII of
--   b d m w r, 0 none), retry_after µs, daily used, µs since last run (-1 none
--   within the interval), window count, bucket backlog µs.
-- Time is the caller's: expiry decisions compare stored times with ARGV now;
-- key TTLs only collect garbage.

local a = {}
for w in string.gmatch(ARGV[1], '%S+') do a[#a + 1] = w end
local dry = a[1] == '1'
local now = tonumber(a[2])
local ddttl = tonumber(a[3])
local block = tonumber(a[4])
local dlimit = tonumber(a[5])
local dttl = tonumber(a[6])
local mi = tonumber(a[7])
local wcount = tonumber(a[8])
local wper = tonumber(a[9])
local rt = tonumber(a[10])
local rcap = tonumber(a[11])
local order = a[12]
local member = a[13]

local function ms(us) return math.ceil(us / 1000) end
local function int(x) return string.format('%d', x) end

local n = 0
local function key() n = n + 1 return KEYS[n] end
local kdd, kb, kd, kmi, kw, kr
if ddttl > 0 then kdd = key() end
if block > 0 then kb = key() end
if dlimit > 0 then kd = key() end
if mi > 0 then kmi = key() end
if wcount > 0 then kw = key() end
if rt > 0 then kr = key() end

if kdd then
  local t = tonumber(redis.call('GET', kdd) or '0')
  if t > now then return '2 0 0 0 -1 0 0' end
end

local denied = {}
local retry = 0
local blocked = false
local used, since, wc, level = 0, -1, 0, 0

if kb then
  local t = tonumber(redis.call('GET', kb) or '0')
  if t > now then blocked = true retry = t - now end
end
if kd then
  used = tonumber(redis.call('GET', kd) or '0')
  if used >= dlimit then denied['d'] = true retry = math.max(retry, dttl) end
end
if kmi then
  local last = redis.call('GET', kmi)
  if last then
    local s = now - tonumber(last)
    if s < mi then since = s denied['m'] = true retry = math.max(retry, mi - s) end
  end
end
local lo = now - wper
if kw then
  wc = redis.call('ZCOUNT', kw, '(' .. int(lo), '+inf')
  if wc >= wcount then
    denied['w'] = true
    local oldest = redis.call('ZRANGEBYSCORE', kw, '(' .. int(lo), '+inf', 'WITHSCORES', 'LIMIT', wc - wcount, 1)
    retry = math.max(retry, tonumber(oldest[2]) + wper - now)
  end
end
local tat = now
if kr then
  tat = math.max(tonumber(redis.call('GET', kr) or '0'), now)
  level = tat - now
  if level + rt > rt * rcap then denied['r'] = true retry = math.max(retry, level + rt - rt * rcap) end
end

local limit = 0
if blocked then
  limit = string.byte('b')
else
  for i = 1, #order do
    local c = string.sub(order, i, i)
    if denied[c] then limit = string.byte(c) break end
  end
end
local status = 0
if limit == 0 then status = 1 retry = 0 end

if not dry then
  if kw then redis.call('ZREMRANGEBYSCORE', kw, '-inf', int(lo)) end
  if status == 1 then
    if kd then
      used = redis.call('INCR', kd)
      redis.call('PEXPIRE', kd, ms(dttl))
    end
    if kmi then redis.call('SET', kmi, int(now), 'PX', ms(mi)) end
    if kw then
      redis.call('ZADD', kw, int(now), int(now) .. '-' .. member)
      redis.call('PEXPIRE', kw, ms(wper))
      wc = wc + 1
    end
    if kr then
      tat = tat + rt
      level = tat - now
      redis.call('SET', kr, int(tat), 'PX', ms(level))
    end
    if kdd then redis.call('SET', kdd, int(now + ddttl), 'PX', ms(ddttl)) end
  elseif kb and not blocked then
    redis.call('SET', kb, int(now + block), 'PX', ms(block))
    retry = math.max(retry, block)
  end
end

return int(status) .. ' ' .. int(limit) .. ' ' .. int(retry) .. ' ' .. int(used) .. ' ' ..
  int(since) .. ' ' .. int(wc) .. ' ' .. int(level)
