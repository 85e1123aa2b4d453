-- Moves the entries of the single outbox stream of earlier versions,
-- KEYS[1], into the stream of their sink, so that an upgrade loses none.
-- KEYS[2]: that stream's retry hash, whose fields of moved entries are
-- removed (a moved entry is due at once). KEYS[3..]: the streams of the
-- sinks named by ARGV[2..], in the same order. ARGV[1]: at most this many
-- entries are looked at by one call, oldest first.
-- An entry of a sink not named stays for an agent that has that sink.
-- Returns how many entries moved.
local dest = {}
for i = 2, #ARGV do
  dest[ARGV[i]] = KEYS[i + 1]
end
local got = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', tonumber(ARGV[1]))
local moved = 0
for _, e in ipairs(got) do
  local f = e[2]
  local sink
  for j = 1, #f, 2 do
    if f[j] == 'sink' then
      sink = f[j + 1]
    end
  end
  local to = sink and dest[sink]
  if to then
    redis.call('XADD', to, '*', unpack(f))
    redis.call('XDEL', KEYS[1], e[1])
    redis.call('HDEL', KEYS[2], e[1])
    moved = moved + 1
  end
end
return moved
