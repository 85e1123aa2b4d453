-- Moves the oldest entries of stream KEYS[1] past its cap out of it, so
-- that nothing beyond the cap is dropped unseen: to the dead stream, when
-- the queue has one, and always back to the caller, which ends them.
-- ARGV[1]: consumer group; ARGV[2]: the cap (entries); ARGV[3]: at most
-- this many are moved by one call; ARGV[4]: '1' when KEYS has the retry
-- hash (stream id -> due ms), whose fields of moved entries are removed;
-- ARGV[5]: the dead stream's approximate MAXLEN, 0 for none; ARGV[6..]:
-- field, value pairs appended to each dead entry (why it died, when).
-- KEYS[1]: the stream; then the retry hash when ARGV[4] is '1'; then the
-- dead stream when ARGV[5] is not 0.
-- Each moved entry is acknowledged, deleted and unscheduled in the same
-- step. Returns the moved entries as XRANGE does ({id, {field, value,
-- ...}}), oldest first.
local over = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[2])
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
over = math.min(over, tonumber(ARGV[3]))
local got = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', over)
for _, e in ipairs(got) do
  local id = e[1]
  if dead then
    local args = {'XADD', dead, 'MAXLEN', '~', ARGV[5], '*'}
    for _, v in ipairs(e[2]) do
      args[#args + 1] = v
    end
    for i = 6, #ARGV do
      args[#args + 1] = ARGV[i]
    end
    redis.call(unpack(args))
  end
  -- The group may not exist yet (no agent claimed from the stream).
  redis.pcall('XACK', KEYS[1], ARGV[1], id)
  redis.call('XDEL', KEYS[1], id)
  if retry then
    redis.call('HDEL', retry, id)
  end
end
return got
