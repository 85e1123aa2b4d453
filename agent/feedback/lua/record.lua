-- Records one person's verdict on a task's report, once.
-- KEYS[1]: the task's verdicts (hash: person -> verdict JSON)
-- KEYS[2]: the capped log of verdicts (stream)
-- ARGV[1]: the person; ARGV[2]: the verdict JSON; ARGV[3]: TTL of KEYS[1]
-- in ms; ARGV[4]: MAXLEN of KEYS[2]; ARGV[5..]: the log entry's fields and
-- values.
-- Returns 1 when recorded, else the verdict JSON recorded before.
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return redis.call('HGET', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local f = {}
for i = 5, #ARGV do f[#f + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(f))
return 1
