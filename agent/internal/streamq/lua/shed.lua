-- Moves the oldest entries of stream KEYS[1] past its cap out of it, so
-- that nothing beyond the cap is dropped unseen: to the dead stream, when
-- the queue has one, and always back to the caller, which ends them.
-- ARGV[1]: consumer group; ARGV[2]: the cap (entries); ARGV[3]: at most
-- this many are moved by one call; ARGV[4]: '1' when KEYS has the retry
-- hash (stream id -> due ms), whose fields of moved entries are removed;
-- ARGV[5]: the dead stream's approximate MAXLEN, 0 for none; ARGV[6]: the
-- claim idle time (ms); ARGV[7..]: field, value pairs appended to each
-- dead entry (why it died, when).
-- KEYS[1]: the stream; then the retry hash when ARGV[4] is '1'; then the
-- dead stream when ARGV[5] is not 0.
-- An entry in flight (pending and idle for less than the claim idle time:
-- a live holder is working on it) is skipped, so that it never ends both
-- done and dead-lettered and its holder's Retry or Remove finds it; the
-- scan goes on past such entries, at most 1024 of them. An entry
-- scheduled for a retry (its idle set to the claim idle time) or whose
-- holder went quiet can be moved.
local n = redis.call('XLEN', KEYS[1])
local over = n - tonumber(ARGV[2])
if over <= 0 then
  return {}
end
local k = 2
local retry, dead
if ARGV[4] == '1' then
  retry = KEYS[k]
  k = k + 1
end
if tonumber(ARGV[5]) > 0 then
  dead = KEYS[k]
end
local want = math.min(over, tonumber(ARGV[3]))
local idle = tonumber(ARGV[6])
local moved = {}
local skipped = 0
local start = '-'
while #moved < want and skipped <= 1024 do
  local got = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', want - #moved)
  if #got == 0 then
    break
  end
  for _, e in ipairs(got) do
    local id = e[1]
    start = '(' .. id
    -- The group may not exist yet (no agent claimed from the stream).
    local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], 'IDLE', 0, id, id, 1)
    if type(p) == 'table' and p[1] and tonumber(p[1][3]) < idle then
      skipped = skipped + 1
    else
      if dead then
        local args = {'XADD', dead, 'MAXLEN', '~', ARGV[5], '*'}
        for _, v in ipairs(e[2]) do
          args[#args + 1] = v
        end
        for i = 7, #ARGV do
          args[#args + 1] = ARGV[i]
        end
        redis.call(unpack(args))
      end
      redis.pcall('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
      if retry then
        redis.call('HDEL', retry, id)
      end
      moved[#moved + 1] = e
    end
  end
end
return moved
