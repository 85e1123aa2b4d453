-- allow.lua: one limiter decision, atomically: dedupe, then for each rule
-- given (the enforced rule first, then shadow rules) failure breaker, block,
-- daily quota, minimum interval, sliding window, leaky bucket and
-- concurrency slots for one key. The enforced rule's verdict decides whether
-- the task runs; a rule consumes quota (and takes a slot, or the breaker's
-- probe) only when every one of its limits allows it AND the task runs. A
-- denial sets the rule's sticky block. With dry = 1 nothing is written
-- (autodiag limits check).
--
-- KEYS: only the ones the decision uses, in this order; on a Cluster every
-- key of one call carries the same hash tag {<limited key value>}:
--   dedupe  <prefix>lim:{tag}:dd:<host>:<diagnostic>:<event>  value = until (µs, decimal), PX = dedupe ttl
--   then for each rule, those it has:
--   state   <prefix>lim:{tag}:s:<rule>  (has_state = 1: a limit other than concurrency, or a block)
--   window  <prefix>lim:{tag}:w:<rule>  (window_zset = 1) ZSET score = run
--           time (µs), member = time-ARGV[3], PX = per
--   slots   <prefix>lim:{tag}:c:<rule>  (concurrency > 0) ZSET member = task
--           id, score = its lease expiry (µs); entries at or before now are
--           pruned; PX = the latest expiry
--   breaker <prefix>lim:{tag}:f:<rule>  (breaker_failures > 0) HASH
--           o = open until (µs, 0 closed), p = task id of the probe,
--           pu = probe's lease expiry (µs), f = failure times (packed '<i8');
--           written here only when a probe is taken (failures are recorded
--           by held.lua)
--
-- The state of one rule for one key is ONE string, so that its limits are a
-- GET (MGET with the dedupe key) and at most one SET (plus the window ZSET
-- commands when window_zset = 1): 5 little-endian int64
-- (struct '<i8' each; times are Unix µs of the callers' clocks, 0 = none)
--   block_until, day (local calendar day, YYYYMMDD), daily count of that
--   day, last allowed run, bucket theoretical arrival time
-- followed by the sliding window: the allowed runs still inside the window,
-- one '<i8' each, ascending, never more than window_count of them (an exact
-- sliding log), unless window_zset = 1: a window whose count is too large to
-- copy on every decision is the ZSET above (ZCOUNT, ZREMRANGEBYSCORE, ZADD,
-- PEXPIRE; trimmed each call, never more than count members). The SET's PX
-- is the longest any part still needs: block, next local midnight (daily
-- count > 0), last run + min_interval, newest window entry + per, bucket
-- drain time. A daily count of another day than ARGV's counts as 0, so the
-- quota resets at local midnight whatever the TTL.
--
-- ARGV[1]: 7 little-endian int64: dry (0|1), now, dedupe_ttl, n (rules),
--   lease_until (expiry of a slot or probe taken now), enforced (1: rule 1
--   is enforced and its verdict decides whether the task runs; 0: every
--   rule is a shadow), runs (when enforced = 0: 1 if the task runs)
-- ARGV[2]: task id (slot member, probe id)
-- ARGV[3]: unique id of this decision (window ZSET member suffix)
-- ARGV[2+2i], i = 1..n: 15 little-endian int64 (durations µs, 0 = the rule
--   does not have that part): block, daily_limit, day (YYYYMMDD),
--   daily_ttl (until the next local midnight), min_interval, window_count,
--   window_per, rate_interval (per/count, rounded up), rate_capacity
--   (count*burst), window_zset (0|1), has_state (0|1), concurrency,
--   breaker_failures, breaker_window, breaker_open_for
-- ARGV[3+2i]: the rule's limit codes d m w r c in rule order ("-" none)
--
-- Returns n records (1 with status 2 for a duplicate) of 9 little-endian
-- int64: status (0 denied, 1 allowed, 2 duplicate), denying limit code
-- (ASCII of f b d m w r c, 0 none), retry_after µs, daily used, µs since
-- last run (-1 none within the interval), window count, bucket backlog µs,
-- slot holders, probe (1: this run is the breaker's probe).
-- Time is the caller's: expiry decisions compare stored times with ARGV now;
-- key TTLs only collect garbage.

local dry, now, ddttl, n, lease, enforced, runs =
  struct.unpack('<i8i8i8i8i8i8i8', ARGV[1])
local task = ARGV[2]
local R = '<i8i8i8i8i8i8i8i8i8'
local I = '<i8'
local SEC = 1000000

local ki = 1
local kdd
if ddttl > 0 then kdd = KEYS[1] ki = 2 end
local rules = {}
for i = 1, n do
  local block, dlimit, day, dttl, mi, wcount, wper, rt, rcap, wz, hs, conc, bf, bw, bo =
    struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8', ARGV[2 + 2 * i])
  -- One constructor with every field the decision sets, so that the table
  -- is sized once.
  local r = {block = block, dlimit = dlimit, day = day, dttl = dttl, mi = mi, wcount = wcount, wper = wper,
    rt = rt, rcap = rcap, wz = wz, hs = hs, conc = conc, bf = bf, bw = bw, bo = bo, order = ARGV[3 + 2 * i],
    ks = false, kw = false, kc = false, kb = false, vs = 0, at = false, upto = false, lo = false, mine = false,
    status = 0, limit = 0, retry = 0, blocked = false, bu = 0, used = 0, last = 0, tat = 0, we = 0, ws = 0,
    since = -1, wc = 0, level = 0, holders = 0, probe = 0, wlog = false}
  if r.hs == 1 then r.ks = KEYS[ki] ki = ki + 1 end
  if r.wz == 1 then r.kw = KEYS[ki] ki = ki + 1 end
  if r.conc > 0 then r.kc = KEYS[ki] ki = ki + 1 end
  if r.bf > 0 then r.kb = KEYS[ki] ki = ki + 1 end
  rules[i] = r
end

if kdd then
  local vdd
  if n > 0 and rules[1].ks then
    local v = redis.call('MGET', kdd, rules[1].ks)
    vdd = v[1]
    rules[1].vs = v[2] or false
  else
    vdd = redis.call('GET', kdd)
  end
  if vdd and tonumber(vdd) > now then return struct.pack(R, 2, 0, 0, 0, -1, 0, 0, 0, 0) end
end

-- check evaluates rule r without writing.
local function check(r)
  local vs = r.vs
  if vs == 0 then vs = r.ks and redis.call('GET', r.ks) end -- 0: not read yet
  -- The window log is read in place: entry k (0-based) is at byte 41 + 8k
  -- of vs, so that a decision copies it once, into the SET.
  local bu, sday, used, last, tat = 0, 0, 0, 0, 0
  local we = 0 -- entries in the log
  if vs and #vs >= 40 then
    bu, sday, used, last, tat = struct.unpack('<i8i8i8i8i8', vs)
    we = (#vs - 40) / 8
  else
    vs = ''
  end
  if sday ~= r.day then used = 0 end
  r.vs = vs
  local function at(k) return (struct.unpack(I, vs, 41 + 8 * k)) end
  -- upto returns the first entry in [a, b) later than t (b if none).
  local function upto(t, a, b)
    while a < b do
      local m = math.floor((a + b) / 2)
      if at(m) <= t then a = m + 1 else b = m end
    end
    return a
  end
  r.at, r.upto = at, upto

  local retry = 0
  local failing, blocked = false, false
  local dd, dm, dw, dr, dc = false, false, false, false, false
  local since, wc, level, holders, probe = -1, 0, 0, 0, 0

  if r.kb then
    local b = redis.call('HMGET', r.kb, 'o', 'p', 'pu')
    local open = tonumber(b[1]) or 0
    if open > 0 then
      local pu = tonumber(b[3]) or 0
      if now < open then
        failing = true retry = open - now
      elseif pu > now and b[2] ~= task then
        failing = true retry = math.max(pu - now, SEC)
      else
        probe = 1 -- half-open: this run, if allowed, is the one probe
      end
    end
  end
  if bu > now then blocked = true if bu - now > retry then retry = bu - now end end
  if r.dlimit > 0 and used >= r.dlimit then
    dd = true
    if r.dttl > retry then retry = r.dttl end
  end
  if r.mi > 0 and last ~= 0 then
    local s = now - last
    if s < r.mi then
      since = s dm = true
      if r.mi - s > retry then retry = r.mi - s end
    end
  end
  local wlog = r.wcount > 0 and not r.kw
  local ws = we -- first entry still in the window
  if wlog then
    ws = upto(now - r.wper, 0, we)
    wc = we - ws
    if wc >= r.wcount then
      dw = true
      local t = at(we - r.wcount) + r.wper - now
      if t > retry then retry = t end
    end
  elseif r.kw then
    r.lo = string.format('%d', now - r.wper)
    wc = redis.call('ZCOUNT', r.kw, '(' .. r.lo, '+inf')
    if wc >= r.wcount then
      dw = true
      local oldest = redis.call('ZRANGEBYSCORE', r.kw, '(' .. r.lo, '+inf', 'WITHSCORES', 'LIMIT', wc - r.wcount, 1)
      local t = tonumber(oldest[2]) + r.wper - now
      if t > retry then retry = t end
    end
  end
  if tat < now then tat = now end
  if r.rt > 0 then
    level = tat - now
    if level + r.rt > r.rt * r.rcap then
      dr = true
      local t = level + r.rt - r.rt * r.rcap
      if t > retry then retry = t end
    end
  end
  if r.kc then
    local nows = string.format('%d', now)
    holders = redis.call('ZCOUNT', r.kc, '(' .. nows, '+inf')
    local mine = tonumber(redis.call('ZSCORE', r.kc, task) or 0)
    if mine > now then
      r.mine = true -- the same task again: it already holds its slot
    elseif holders >= r.conc then
      dc = true
      local first = redis.call('ZRANGEBYSCORE', r.kc, '(' .. nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      local t = math.max(tonumber(first[2]) - now, SEC)
      if t > retry then retry = t end
    end
  end

  local limit = 0
  if failing then
    limit = 102 -- f
  elseif blocked then
    limit = 98 -- b
  else
    for i = 1, #r.order do
      local c = string.byte(r.order, i)
      if (c == 100 and dd) or (c == 109 and dm) or (c == 119 and dw) or (c == 114 and dr) or (c == 99 and dc) then
        limit = c
        break
      end
    end
  end
  r.status = 0
  if limit == 0 then r.status = 1 retry = 0 end
  r.limit, r.retry, r.blocked = limit, retry, blocked or failing
  r.bu, r.used, r.last, r.tat, r.we, r.ws = bu, used, last, tat, we, ws
  r.since, r.wc, r.level, r.holders, r.probe = since, wc, level, holders, probe
  r.wlog = wlog
end

-- apply writes rule r's part of the decision.
local function apply(r)
  local at, upto = r.at, r.upto
  local vs, we, ws = r.vs, r.we, r.ws
  local take = r.status == 1 and runs == 1
  local bu, used, last, tat = r.bu, r.used, r.last, r.tat
  if r.kw then
    redis.call('ZREMRANGEBYSCORE', r.kw, '-inf', r.lo)
    if r.wc > r.wcount then -- never more than count (after a lower count)
      redis.call('ZREMRANGEBYRANK', r.kw, 0, r.wc - r.wcount - 1)
    end
    if take then
      local nows = string.format('%d', now)
      redis.call('ZADD', r.kw, nows, nows .. '-' .. ARGV[3])
      redis.call('PEXPIRE', r.kw, math.ceil(r.wper / 1000))
    end
  end
  if r.kc then
    redis.call('ZREMRANGEBYSCORE', r.kc, '-inf', string.format('%d', now))
    if take then
      redis.call('ZADD', r.kc, string.format('%d', lease), task)
      if not r.mine then r.holders = r.holders + 1 end
      local last_ = redis.call('ZRANGE', r.kc, -1, -1, 'WITHSCORES')
      redis.call('PEXPIRE', r.kc, math.max(1, math.ceil((tonumber(last_[2]) - now) / 1000)))
    end
  end
  if r.kb and take and r.probe == 1 then
    redis.call('HSET', r.kb, 'p', task, 'pu', string.format('%d', lease))
    redis.call('PEXPIRE', r.kb, math.max(1, math.ceil((lease - now + math.max(r.bo, r.bw)) / 1000)))
  end
  if r.kb and r.status == 1 and not take then r.probe = 0 end

  local write = false
  if take then
    write = true
    bu = 0
    if r.dlimit > 0 then used = used + 1 end
    if r.mi > 0 then last = now end
    if r.wcount > 0 then r.wc = r.wc + 1 end
    if r.rt > 0 then tat = tat + r.rt end
  elseif r.status == 0 and r.block > 0 and not r.blocked then
    write = true
    bu = now + r.block
    if r.block > r.retry then r.retry = r.block end
  end
  if write and r.ks then
    -- The new log: entries ws..we-1, with now inserted in order when taken,
    -- as two pieces around the insertion point (b = '' when not inserted).
    local a, b, newest = '', '', 0
    if r.wlog then
      if take then
        local p = upto(now, ws, we)
        a = string.sub(vs, 41 + 8 * ws, 40 + 8 * p) .. struct.pack(I, now)
        if p < we then b = string.sub(vs, 41 + 8 * p) end
        newest = now
        if p < we then newest = at(we - 1) end
      elseif ws < we then
        a = string.sub(vs, 41 + 8 * ws)
        newest = at(we - 1)
      end
      if #a + #b > r.wcount * 8 then -- never more than count (after a lower count)
        a = string.sub(a .. b, #a + #b - r.wcount * 8 + 1)
        b = ''
      end
    end
    -- The key lives as long as its longest-lived part.
    local ttl = 0
    if bu > now then ttl = bu - now end
    if r.dlimit > 0 and used > 0 and r.dttl > ttl then ttl = r.dttl end
    if r.mi > 0 and last ~= 0 and last + r.mi - now > ttl then ttl = last + r.mi - now end
    if #a > 0 and newest + r.wper - now > ttl then ttl = newest + r.wper - now end
    if r.rt > 0 and tat - now > ttl then ttl = tat - now end
    if r.dlimit == 0 then used = 0 end
    if r.mi == 0 then last = 0 end
    if r.rt == 0 then tat = 0 end
    if ttl > 0 then -- else nothing in it matters any more (a window in a ZSET only)
      redis.call('SET', r.ks, struct.pack('<i8i8i8i8i8', bu, r.day, used, last, tat) .. a .. b, 'PX', math.ceil(ttl / 1000))
    end
  end
  r.bu, r.used, r.last, r.tat = bu, used, last, tat
end

for i = 1, n do check(rules[i]) end
if enforced == 1 then
  runs = 0
  if n == 0 or rules[1].status == 1 then runs = 1 end
end
if dry == 0 then
  for i = 1, n do apply(rules[i]) end
  if kdd and runs == 1 then
    redis.call('SET', kdd, string.format('%d', now + ddttl), 'PX', math.ceil(ddttl / 1000))
  end
elseif runs == 0 then
  for i = 1, n do rules[i].probe = 0 end
end

local out = {}
for i = 1, n do
  local r = rules[i]
  local level, used = 0, r.used
  if r.rt > 0 then level = r.tat - now end
  if r.dlimit == 0 then used = 0 end
  out[i] = struct.pack(R, r.status, r.limit, r.retry, used, r.since, r.wc, level, r.holders, r.probe)
end
return table.concat(out)
