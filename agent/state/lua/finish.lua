-- finish.lua: record a task's outcome as done, which ends its lease; where
-- one node holds every key (a standalone server), also the writes that
-- belong to the task's end, so that they land with the record or not at
-- all, in one round trip.
--
-- KEYS[1]  task record hash   <prefix>task:{<id>}
-- KEYS[2]  execution lease    <prefix>lease:{<id>}: not written; left to
--          its PX. A lease counts only while the record's status is
--          running (claim.lua), which this script ends, so a DEL would be
--          a command per task for nothing. Kept in KEYS so that every
--          agent version sends the same call.
-- KEYS[3…] in order, each only when its ARGV says so:
--          the owner's in-flight hash <prefix>inflight:<instance>,
--          the audit stream <prefix>audit,
--          one stream per write (an outbox stream, the report jobs)
-- ARGV[1]  TaskRecord JSON (the final record)
-- ARGV[2]  owner to record
-- ARGV[3]  attempts; 0 keeps the stored count
-- ARGV[4]  record TTL, ms
-- ARGV[5]  now, unix ms, from the store's clock
-- ARGV[6]  finish id, the same on every try of one finish; '' = none
-- ARGV[7]  the task id when KEYS has the in-flight hash: HDEL it there
-- ARGV[8]  1 = KEYS has the audit stream; then ARGV[9] its MAXLEN ~ and
--          ARGV[10] the entry (field e)
-- ARGV[11] number of writes; per write, in order: its MAXLEN mode ('',
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
-- The record's TTL: a claim or renew set it to the record TTL plus four
-- leases, so while the finishing owner's lease is live (lease_until not
-- past) the record outlives now by more than the record TTL and is left
-- as it is; otherwise (lease lapsed, another owner's record, no record)
-- it is set to the record TTL. lease_until stays in the done record: it
-- is read only while the status is running.
--
-- Returns {previous owner or '', attempts, superseded (0|1), repeated (0|1),
-- the writes' stream ids…}; the caller removes the task from a previous
-- owner's in-flight hash (another key, another call).
local v = redis.call('HMGET', KEYS[1], 'owner', 'attempts', 'status', 'finish', 'lease_until')
local prev, stored, status = v[1] or '', tonumber(v[2]) or 0, v[3]
if ARGV[6] ~= '' and status == 'done' and v[4] == ARGV[6] then
  return {prev, stored, 0, 1}
end

local k = 3
if ARGV[7] ~= '' then
  redis.call('HDEL', KEYS[k], ARGV[7])
  k = k + 1
end
if ARGV[8] == '1' then
  redis.call('XADD', KEYS[k], 'MAXLEN', '~', ARGV[9], '*', 'e', ARGV[10])
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
local live = status == 'running' and prev == ARGV[2] and (tonumber(v[5]) or 0) >= tonumber(ARGV[5])
redis.call('HSET', KEYS[1], 'status', 'done', 'owner', ARGV[2],
  'attempts', attempts, 'rec', ARGV[1], 'finish', ARGV[6])
if not live then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end

local out = {prev, attempts, 0, 0}
local a = 12
for _ = 1, tonumber(ARGV[11]) or 0 do
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
