-- Moves the oldest entries of stream KEYS[1] past its cap to the dead
-- stream KEYS[3], so that nothing beyond the cap is dropped unseen.
-- KEYS[2] is the retry hash (stream id -> due ms) whose fields of moved
-- entries are removed.
-- ARGV[1]: consumer group; ARGV[2]: the cap (entries); ARGV[3]: the dead
-- stream's approximate MAXLEN; ARGV[4]: at most this many are moved by
-- one call; ARGV[5]: the claim idle time (ms); ARGV[6..]: field, value
-- pairs appended to each dead entry (why it died, when).
-- An entry in flight (pending and idle for less than the claim idle time:
-- a live holder is sending it) is skipped, so that it never ends both
-- delivered and dead-lettered and its holder's Retry finds it; the scan
-- goes on past such entries, at most 1024 of them. An entry scheduled for
-- a retry (its idle set to the claim idle time) or whose holder went
-- quiet can be moved.
-- Each moved entry is acknowledged, deleted and unscheduled in the same
-- step. Returns the moved entries as XRANGE does ({id, {field, value,
-- ...}}), oldest first.
local over = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[2])
if over <= 0 then
  return {}
end
local want = math.min(over, tonumber(ARGV[4]))
local idle = tonumber(ARGV[5])
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
      local args = {'XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*'}
      for _, v in ipairs(e[2]) do
        args[#args + 1] = v
      end
      for i = 6, #ARGV do
        args[#args + 1] = ARGV[i]
      end
      redis.call(unpack(args))
      redis.pcall('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
      moved[#moved + 1] = e
    end
  end
end
return moved
