-- finish.lua: record a task's outcome as done and drop its lease; where
-- one node holds every key (a standalone server), also the writes that
-- belong to the task's end, so that they land with the record or not at
-- all, in one round trip.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
-- KEYS[2]  execution lease    <prefix>lease:{<id>}
-- KEYS[3…] in order, each only when its ARGV says so:
--          the owner's in-flight hash <prefix>inflight:<instance>,
--          the audit stream <prefix>audit,
--          one stream per write (an outbox stream, the report jobs)
-- ARGV[1]  TaskRecord JSON (the final record)
-- ARGV[2]  owner to record
-- ARGV[3]  attempts; 0 keeps the stored count
-- ARGV[4]  record TTL, ms
-- ARGV[5]  finish id, the same on every try of one finish; '' = none
-- ARGV[6]  the task id when KEYS has the in-flight hash: HDEL it there
-- ARGV[7]  1 = KEYS has the audit stream; then ARGV[8] its MAXLEN ~ and
--          ARGV[9] the entry (field e)
-- ARGV[10] number of writes; per write, in order: its MAXLEN mode ('',
--          '~' or '='), MAXLEN, number of field-value strings n, then n
--          strings
--
-- A finish never overwrites a later attempt: an agent whose lease lapsed
-- while it ran finishes after another agent claimed the task again. When the
-- stored attempts exceed ARGV[3] (or, with ARGV[3] 0, the task runs under
-- another owner) the record, the lease and the writes are left alone; the
-- in-flight entry and the audit entry, which are this run's, are written.
-- A finish whose id the record already carries landed before (its reply
-- was lost): nothing is written again.
--
-- Returns {previous owner or '', attempts, superseded (0|1), repeated (0|1),
-- the writes' stream ids…}; the caller removes the task from a previous
-- owner's in-flight hash (another key, another call).
local v = redis.call('HMGET', KEYS[1], 'owner', 'attempts', 'status', 'finish')
local prev, stored, status = v[1] or '', tonumber(v[2]) or 0, v[3]
if ARGV[5] ~= '' and status == 'done' and v[4] == ARGV[5] then
  return {prev, stored, 0, 1}
end

local k = 3
if ARGV[6] ~= '' then
  redis.call('HDEL', KEYS[k], ARGV[6])
  k = k + 1
end
if ARGV[7] == '1' then
  redis.call('XADD', KEYS[k], 'MAXLEN', '~', ARGV[8], '*', 'e', ARGV[9])
  k = k + 1
end

local attempts = tonumber(ARGV[3]) or 0
if (attempts > 0 and stored > attempts) or
   (attempts == 0 and status == 'running' and prev ~= ARGV[2]) then
  return {prev, stored, 1, 0}
end
if attempts == 0 then
  attempts = stored
end
redis.call('HSET', KEYS[1], 'status', 'done', 'owner', ARGV[2],
  'attempts', attempts, 'rec', ARGV[1], 'finish', ARGV[5])
redis.call('HDEL', KEYS[1], 'lease_until')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])

local out = {prev, attempts, 0, 0}
local a = 11
for _ = 1, tonumber(ARGV[10]) or 0 do
  local mode, maxlen, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local args = {KEYS[k]}
  if mode ~= '' then
    args[#args + 1] = 'MAXLEN'
    args[#args + 1] = mode
    args[#args + 1] = maxlen
  end
  args[#args + 1] = '*'
  for i = 1, n do
    args[#args + 1] = ARGV[a + 2 + i]
  end
  out[#out + 1] = redis.call('XADD', unpack(args))
  a = a + 3 + n
  k = k + 1
end
return out
