-- allow.lua: one limiter decision, atomically: dedupe, then for each rule
-- given (the enforced rule first, then shadow rules) failure breaker, block,
-- daily quota, minimum interval, sliding window, leaky bucket and
-- concurrency slots for one key. The enforced rule's verdict decides whether
-- the task runs; a rule consumes quota (and takes a slot, or the breaker's
-- probe) only when every one of its limits allows it AND the task runs. A
-- denial sets the rule's sticky block (a breaker's "failing" does not: it
-- has open_for). Rules are evaluated and written in order, one at a time,
-- so the enforced verdict is known before a shadow writes. With dry = 1
-- nothing is written (autodiag limits check).
--
-- KEYS: only the ones the decision uses, in this order; on a Cluster every
-- key of one call carries the same hash tag {<limited key value>}:
--   dedupe  <prefix>lim:{tag}:dd:<host>:<diagnostic>:<event>  value = until (µs, decimal), PX = dedupe ttl
--   then for each rule, those it has:
--   state   <prefix>lim:{tag}:s:<rule>  (has_state = 1: a limit other than concurrency, or a block)
--   window  <prefix>lim:{tag}:w:<rule>  (window_zset = 1) ZSET score = run
--           time (µs), member = time-ARGV[3], PX = per
--   slots   <prefix>lim:{tag}:c:<rule>[:asg:<group>|:az:<zone>]  (concurrency > 0)
--           ZSET member = task id, score = its lease expiry (µs); entries at
--           or before now count for nothing and are pruned by the
--           decisions of one second in eight; PX = the latest expiry
--           (PEXPIRE GT)
--   agents  <prefix>inservice[:asg:<group>|:az:<zone>]  (max_percent > 0 and
--           agents < 0, single server only) ZSET member = instance id,
--           score = its heartbeat expiry (Unix ms), written by the agents;
--           read only (ZCOUNT of the scores after now)
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
--   breaker_failures, breaker_window, breaker_open_for, max_percent
--   (hundredths of a percent, 0 none: the concurrency cap is then
--   max(1, floor(max_percent × agents / 10000))), agents (the agents in
--   service counted by the caller, -1: read from the agents key)
-- ARGV[3+2i]: the rule's limit codes d m w r c in rule order ("-" none)
--
-- Returns n records (1 with status 2 for a duplicate) of 11 little-endian
-- int64: status (0 denied, 1 allowed, 2 duplicate), denying limit code
-- (ASCII of f b d m w r c, 0 none), retry_after µs, daily used, µs since
-- last run (-1 none within the interval), window count, bucket backlog µs,
-- slot holders, probe (1: this run is the breaker's probe), the
-- concurrency cap applied, the agents in service counted (max_percent).
-- Time is the caller's: expiry decisions compare stored times with ARGV now;
-- key TTLs only collect garbage.

local dry, now, ddttl, n, lease, enforced, runs =
  struct.unpack('<i8i8i8i8i8i8i8', ARGV[1])
local task = ARGV[2]
local R = '<i8i8i8i8i8i8i8i8i8i8i8'
local I = '<i8'
local SEC = 1000000

local ki = 1
local kdd
if ddttl > 0 then kdd = KEYS[1] ki = 2 end

-- expire_latest keeps a slots ZSET alive until its latest lease expiry,
-- after a slot with expiry lease (µs) was added or renewed. fresh: the
-- ZADD made the key (no holder before it), which has no TTL yet. Otherwise
-- PEXPIRE GT (Redis 7.0) only raises the TTL, so it stays the latest
-- expiry; a server that refuses GT (before 7.0) reads the latest score.
local function expire_latest(kc, lease, fresh)
  local ttl = math.max(1, math.ceil((lease - now) / 1000))
  if fresh then
    redis.call('PEXPIRE', kc, ttl)
  elseif not pcall(redis.call, 'PEXPIRE', kc, ttl, 'GT') then
    local latest = redis.call('ZRANGE', kc, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', kc, math.max(1, math.ceil((tonumber(latest[2]) - now) / 1000)))
  end
end

-- rule evaluates rule i and, unless dry, writes its part of the decision.
-- vs is its state when already read (false: absent), nil when not. It
-- returns the rule's reply record. Rules are evaluated in order, so the
-- enforced rule's verdict (rule 1) is known before any shadow writes.
local function rule(i, vs)
  local block, dlimit, day, dttl, mi, wcount, wper, rt, rcap, wz, hs, conc, bf, bw, bo, cpct, agents =
    struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8', ARGV[2 + 2 * i])
  local order = ARGV[3 + 2 * i]
  local ks, kw, kc, ka, kb
  if hs == 1 then ks = KEYS[ki] ki = ki + 1 end
  if wz == 1 then kw = KEYS[ki] ki = ki + 1 end
  if conc > 0 then kc = KEYS[ki] ki = ki + 1 end
  if conc > 0 and cpct > 0 and agents < 0 then ka = KEYS[ki] ki = ki + 1 end
  if bf > 0 then kb = KEYS[ki] ki = ki + 1 end
  if cpct > 0 then
    if ka then agents = redis.call('ZCOUNT', ka, '(' .. string.format('%d', math.floor(now / 1000)), '+inf') end
    conc = math.max(1, math.floor(cpct * agents / 10000))
  else
    agents = 0
  end
  if vs == nil and ks then vs = redis.call('GET', ks) end

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
  local failing, blocked = false, false
  local dd, dm, dw, dr, dc = false, false, false, false, false
  local since, wc, level, holders, probe = -1, 0, 0, 0, 0

  if kb then
    local b = redis.call('HMGET', kb, 'o', 'p', 'pu')
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
  local wlog = wcount > 0 and not kw
  local ws = we -- first entry still in the window
  local lo
  if wlog then
    ws = upto(now - wper, 0, we)
    wc = we - ws
    if wc >= wcount then
      dw = true
      local t = at(we - wcount) + wper - now
      if t > retry then retry = t end
    end
  elseif kw then
    lo = string.format('%d', now - wper)
    wc = redis.call('ZCOUNT', kw, '(' .. lo, '+inf')
    if wc >= wcount then
      dw = true
      local oldest = redis.call('ZRANGEBYSCORE', kw, '(' .. lo, '+inf', 'WITHSCORES', 'LIMIT', wc - wcount, 1)
      local t = tonumber(oldest[2]) + wper - now
      if t > retry then retry = t end
    end
  end
  if tat < now then tat = now end
  if rt > 0 then
    level = tat - now
    if level + rt > rt * rcap then
      dr = true
      local t = level + rt - rt * rcap
      if t > retry then retry = t end
    end
  end
  if kc then
    local nows = string.format('%d', now)
    -- The holders are the slots whose lease has not expired. An expired
    -- one (a run whose agent died holding it) counts for nothing; the
    -- decisions of one second in eight prune them, and the key's TTL, its
    -- latest lease, drops them all once the key goes quiet. Pruning at
    -- every decision cost a command per task for members that decide
    -- nothing.
    holders = redis.call('ZCOUNT', kc, '(' .. nows, '+inf')
    if dry == 0 and math.floor(now / SEC) % 8 == 0 then
      redis.call('ZREMRANGEBYSCORE', kc, '-inf', nows)
    end
    -- Below the cap the task may hold its slot already (the same task
    -- again); only at the cap does that decide, and it is asked.
    if holders >= conc then
      if tonumber(redis.call('ZSCORE', kc, task) or 0) <= now then
        dc = true
        local first = redis.call('ZRANGEBYSCORE', kc, '(' .. nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        local t = math.max(tonumber(first[2]) - now, SEC)
        if t > retry then retry = t end
      end
    end
  end

  local limit = 0
  if failing then
    limit = 102 -- f
  elseif blocked then
    limit = 98 -- b
  else
    for j = 1, #order do
      local c = string.byte(order, j)
      if (c == 100 and dd) or (c == 109 and dm) or (c == 119 and dw) or (c == 114 and dr) or (c == 99 and dc) then
        limit = c
        break
      end
    end
  end
  local status = 0
  if limit == 0 then status = 1 retry = 0 end
  if i == 1 and enforced == 1 then
    runs = 0
    if status == 1 then runs = 1 end
  end
  local take = status == 1 and runs == 1
  if not take then probe = 0 end

  if dry == 0 then
    if kw then
      redis.call('ZREMRANGEBYSCORE', kw, '-inf', lo)
      if wc > wcount then -- never more than count (after a lower count)
        redis.call('ZREMRANGEBYRANK', kw, 0, wc - wcount - 1)
      end
      if take then
        local nows = string.format('%d', now)
        redis.call('ZADD', kw, nows, nows .. '-' .. ARGV[3])
        redis.call('PEXPIRE', kw, math.ceil(wper / 1000))
      end
    end
    if kc and take then
      -- No live slot: the key is new (no TTL yet) or holds expired slots
      -- only, its TTL no later than theirs; either way this lease is the
      -- latest.
      local fresh = holders == 0
      if redis.call('ZADD', kc, string.format('%d', lease), task) == 1 then
        holders = holders + 1
      else
        -- The task had a slot already: a live one was counted above, an
        -- expired one not. Rare (a decision made again, a run again after
        -- its agent died): count again.
        holders = redis.call('ZCOUNT', kc, '(' .. string.format('%d', now), '+inf')
      end
      expire_latest(kc, lease, fresh)
    end
    if probe == 1 then
      redis.call('HSET', kb, 'p', task, 'pu', string.format('%d', lease))
      redis.call('PEXPIRE', kb, math.max(1, math.ceil((lease - now + math.max(bo, bw)) / 1000)))
    end

    local write = false
    if take then
      write = true
      bu = 0
      if dlimit > 0 then used = used + 1 end
      if mi > 0 then last = now end
      if wcount > 0 then wc = wc + 1 end
      if rt > 0 then tat = tat + rt end
    elseif status == 0 and block > 0 and not blocked and not failing then
      write = true
      bu = now + block
      if block > retry then retry = block end
    end
    if write and ks then
      -- The new log: entries ws..we-1, with now inserted in order when taken,
      -- as two pieces around the insertion point (b = '' when not inserted).
      local a, b, newest = '', '', 0
      if wlog then
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
  end

  if rt > 0 then level = tat - now else level = 0 end
  if dlimit == 0 then used = 0 end
  return struct.pack(R, status, limit, retry, used, since, wc, level, holders, probe, conc, agents)
end

local vs1
if kdd then
  local vdd
  local _, _, _, _, _, _, _, _, _, _, hs1 = struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8', ARGV[4])
  if n > 0 and hs1 == 1 then
    local v = redis.call('MGET', kdd, KEYS[2])
    vdd, vs1 = v[1], v[2]
  else
    vdd = redis.call('GET', kdd)
  end
  if vdd and tonumber(vdd) > now then return struct.pack(R, 2, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0) end
end

local out = rule(1, vs1)
if n > 1 then
  out = {out}
  for i = 2, n do out[i] = rule(i) end
  out = table.concat(out)
end
if dry == 0 and kdd and runs == 1 then
  redis.call('SET', kdd, string.format('%d', now + ddttl), 'PX', math.ceil(ddttl / 1000))
end
return out
