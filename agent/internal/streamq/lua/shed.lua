-- Moves the oldest entries of stream KEYS[1] past its cap to the dead
-- stream KEYS[3], so that nothing beyond the cap is dropped unseen.
-- KEYS[2] is the retry hash (stream id -> due ms) whose fields of moved
-- entries are removed.
-- ARGV[1]: consumer group; ARGV[2]: the cap (entries); ARGV[3]: the dead
-- stream's approximate MAXLEN; ARGV[4]: at most this many are moved by
-- one call; ARGV[5..]: field, value pairs appended to each dead entry
-- (why it died, when).
-- Each moved entry is acknowledged, deleted and unscheduled in the same
-- step. Returns the moved entries as XRANGE does ({id, {field, value,
-- ...}}), oldest first.
local over = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[2])
if over <= 0 then
  return {}
end
over = math.min(over, tonumber(ARGV[4]))
local got = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', over)
for _, e in ipairs(got) do
  local id = e[1]
  local args = {'XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*'}
  for _, v in ipairs(e[2]) do
    args[#args + 1] = v
  end
  for i = 5, #ARGV do
    args[#args + 1] = ARGV[i]
  end
  redis.call(unpack(args))
  -- The group may not exist yet (no agent claimed from the stream).
  redis.pcall('XACK', KEYS[1], ARGV[1], id)
  redis.call('XDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
return got
