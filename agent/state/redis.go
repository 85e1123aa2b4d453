package state

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/rediswait"
)

// Lua scripts, one per decision; each file states its KEYS and ARGV.
var (
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/finish.lua
	finishLua string
	//go:embed lua/release.lua
	releaseLua string

	claimScript   = redis.NewScript(claimLua)
	renewScript   = redis.NewScript(renewLua)
	finishScript  = redis.NewScript(finishLua)
	releaseScript = redis.NewScript(releaseLua)

	// setReportScript writes the report beside the record (field report),
	// only while the record exists, so a late report never recreates an
	// expired record without a TTL.
	setReportScript = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'report', ARGV[1])
return 1`)
)

// RedisOptions configure a Redis store; zero values take the defaults.
type RedisOptions struct {
	// Prefix starts every key (redis.prefix, default "autodiag:").
	Prefix string
	// Clock decides lease expiry and timestamps; nil = wall clock. Agents on
	// different hosts compare lease deadlines written by each other's clocks,
	// so hosts are expected to run NTP (EC2 does); the lease key's own PX
	// bounds a lease in Redis time regardless.
	Clock clock.Clock
	// RecordTTL is how long a task record is kept once it is done or
	// interrupted, and the TTL of in-flight hashes (default 24h).
	RecordTTL time.Duration
	// AuditMaxLen caps the audit stream (XADD MAXLEN ~, default 10000);
	// with AuditShards > 1 it is shared among the shards.
	AuditMaxLen int64
	// AuditShards spreads the audit entries over that many streams,
	// P audit:{n} for n in 0..AuditShards-1, by a hash of the task id
	// (redis.audit_shards): one stream takes one XADD per task of the
	// whole fleet. 0 or 1: the one stream P audit.
	AuditShards int
	// MaxOutput bounds the output stored in a task record, in bytes; longer
	// output is cut and marked Truncated (default 64 KiB).
	MaxOutput int
	// MaxInstances bounds the instance index (default 10000); with
	// InstanceShards > 1 each shard holds its share.
	MaxInstances int64
	// InstanceShards spreads the instance index over that many sorted
	// sets, P instances:{n} for n in 0..InstanceShards-1, by a hash of the
	// instance id (redis.instance_shards): every agent writes its entry
	// at every heartbeat. 0 or 1: the one index P instances.
	InstanceShards int
	// InService, when set, names the in-service indexes an instance
	// belongs to (full keys): PutInstance adds it to each, scored by its
	// heartbeat expiry (Unix ms), while its state is InstanceInService, and
	// removes it otherwise. Limiter max_percent caps count them. nil = none
	// kept.
	InService func(inst Instance) []string
}

// client is what the stores of a fleet share: one Redis (standalone,
// Sentinel or Cluster through go-redis UniversalClient).
//
// Keys, with P the prefix:
//
//	P task:{ID}       hash: rec (TaskRecord JSON), status, owner, attempts,
//	                  lease_until (unix ms), finish (FinishExtras.ID of the
//	                  finish that wrote it), report. TTL: while running
//	                  RecordTTL + 4×lease, refreshed on claim and renew, so
//	                  that a finish within the lease leaves it (the record
//	                  outlives the end by more than RecordTTL); a finish
//	                  after the lease lapsed sets RecordTTL.
//	P lease:{ID}      string owner, SET PX lease: the execution lease,
//	                  counted only while the record is running; a finish
//	                  leaves it to its PX.
//	P inflight:INST   hash task id → InflightEntry JSON. TTL RecordTTL,
//	                  refreshed on every claim and by PutInstance (the agent's
//	                  heartbeat) at most once every indexTrimEvery, with the
//	                  index trim; entries leave on Finish/Release/Recover.
//	P instance:INST   Instance JSON with the heartbeat TTL.
//	P instances       sorted set of instance ids scored by their expiry (unix
//	                  ms), trimmed of expired ids on every read and, with its
//	                  cap MaxInstances and TTL RecordTTL, by each writer at
//	                  most once every indexTrimEvery.
//	P instances:{N}   with InstanceShards > 1, instead of P instances:
//	                  shard N (FNV-1a of the instance id mod
//	                  InstanceShards), the same entries, scores, trims and
//	                  TTL; cap MaxInstances/InstanceShards (rounded up).
//	InService(inst)   with RedisOptions.InService: sorted sets of the ids of
//	                  instances in service, scored like P instances, trimmed
//	                  of expired ids on every write; TTL RecordTTL.
//	P drain:INST      DrainRecord JSON, TTL until one RecordTTL past its deadline.
//	P audit           stream, XADD MAXLEN ~ AuditMaxLen.
//	P audit:{N}       with AuditShards > 1, instead of P audit: shard N
//	                  (FNV-1a of the task id mod AuditShards), XADD
//	                  MAXLEN ~ AuditMaxLen/AuditShards (rounded up); the
//	                  hash tag lets each shard live on any Cluster node.
//	P mark:{KEY}      string "1", SET NX PX ttl: MarkOnce.
//
// Task record and lease share the hash tag {ID}, so Claim, Renew, Finish and
// Release are each one atomic script on Redis Cluster too. The in-flight hash
// lives on another slot: on a standalone server the claim script writes it
// too, when the claim succeeds; on a cluster it is written by its own
// command, sent ahead of the claim script in the same pipeline (and removed
// again when the claim fails), and the two go to different nodes, so their
// order is not guaranteed there. A crash between the two leaves an
// in-flight entry whose record is not running under the instance; Recover
// and Inflight consult the task record's owner and status, so such an
// entry is ignored and cleaned.
// The converse (a running record with no in-flight entry, possible on a
// cluster) is harmless too: the lease simply expires and the next delivery
// is claimed by whoever receives it, with the attempt counted.
//
// Each concern is its own type over the one client: RedisLeases (claim,
// renew, release, recover), RedisRecords (the records' ends and reads, the
// marks), RedisAudit (the audit stream), RedisPresence (instance records,
// their indexes and host names, drains) and RedisHandoff (what one agent
// hands another: lifecycle notices and task messages).
type client struct {
	c redis.UniversalClient
	o RedisOptions
	k keys
	// oneNode: every key is on one server (not a Cluster or a Ring), so
	// one script may touch keys of different hash tags.
	oneNode bool
	// waiter: c cuts a call at its context's deadline itself
	// (ContextTimeoutEnabled), so a call runs on its caller's goroutine;
	// otherwise each call waits for its reply at most until its context
	// ends (wait), read on one of waiter's goroutines.
	waiter rediswait.Waiter
}

// RedisHandoff carries what one agent hands another: lifecycle notices
// (GiveNotice) and task messages (GiveTask), each read by a blocking read
// on a connection of its own.
type RedisHandoff struct {
	*client
	// hand is the connection of the blocking hand-off reads.
	hand handoffConn
	// handTasks is the connection of the blocking reads of the tasks
	// handed to this agent (TakeTasks), apart from hand so that neither
	// reader finds the other's connection busy.
	handTasks handoffConn
}

var (
	_ LeaseStore = (*RedisLeases)(nil)
	_ TaskStore  = (*RedisRecords)(nil)
	_ Marks      = (*RedisRecords)(nil)
	_ AuditLog   = (*RedisAudit)(nil)
	_ Presence   = (*RedisPresence)(nil)
)

// NewRedis returns the stores of a fleet on one client. The client
// belongs to the caller: Close does not close it.
func NewRedis(rc redis.UniversalClient, o RedisOptions) Store {
	if o.Prefix == "" {
		o.Prefix = "autodiag:"
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.RecordTTL <= 0 {
		o.RecordTTL = 24 * time.Hour
	}
	if o.AuditMaxLen <= 0 {
		o.AuditMaxLen = 10000
	}
	if o.AuditShards < 1 {
		o.AuditShards = 1
	}
	if o.InstanceShards < 1 {
		o.InstanceShards = 1
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = 64 << 10
	}
	if o.MaxInstances <= 0 {
		o.MaxInstances = 10000
	}
	_, oneNode := rc.(*redis.Client)
	k := keys{prefix: o.Prefix, auditShards: o.AuditShards, instanceShards: o.InstanceShards,
		auditMaxLen: o.AuditMaxLen, maxInstances: o.MaxInstances}
	c := &client{c: rc, o: o, k: k, oneNode: oneNode, waiter: rediswait.For(rc)}
	records, hand := &RedisRecords{c}, &RedisHandoff{client: c}
	return Store{LeaseStore: &RedisLeases{c}, TaskStore: records, AuditLog: &RedisAudit{c}, Presence: &RedisPresence{client: c},
		Marks: records, Handoff: hand, close: hand.Close}
}

// keys names the store's Redis keys (docs/redis-keys.md) from its
// options: the prefix and how many shards the audit stream and the
// instance index have.
type keys struct {
	prefix                      string
	auditShards, instanceShards int
	auditMaxLen, maxInstances   int64
}

func (k keys) task(id string) string        { return k.prefix + "task:{" + id + "}" }
func (k keys) lease(id string) string       { return k.prefix + "lease:{" + id + "}" }
func (k keys) inflight(inst string) string  { return k.prefix + "inflight:" + inst }
func (k keys) instance(inst string) string  { return k.prefix + "instance:" + inst }
func (k keys) drain(inst string) string     { return k.prefix + "drain:" + inst }
func (k keys) handoff(inst string) string   { return k.prefix + "handoff:" + inst }
func (k keys) handTasks(inst string) string { return k.prefix + "handtasks:" + inst }
func (k keys) hostName(name string) string  { return k.prefix + "hostname:" + name }
func (k keys) mark(key string) string       { return k.prefix + "mark:{" + key + "}" }

// shardOf is the shard of id among n: FNV-1a (32 bit) of id mod n.
func shardOf(id string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// instances is the instance index that holds the entry of inst.
func (k keys) instances(inst string) string {
	return k.instancesShard(shardOf(inst, max(1, k.instanceShards)))
}

func (k keys) instancesShard(n int) string { return k.sharded("instances", n, k.instanceShards) }

// audit is the audit stream an entry of task id goes to.
func (k keys) audit(id string) string { return k.auditShard(shardOf(id, max(1, k.auditShards))) }

func (k keys) auditShard(n int) string { return k.sharded("audit", n, k.auditShards) }

// sharded is shard n of name among shards: the one key name itself when
// there is one (the documented key, unchanged), else name:{n}, its own
// hash tag so that each shard may live on any Cluster node.
func (k keys) sharded(name string, n, shards int) string {
	if shards <= 1 {
		return k.prefix + name
	}
	return k.prefix + name + ":{" + strconv.Itoa(n) + "}"
}

// auditCap is the cap of one audit stream.
func (k keys) auditCap() int64 {
	n := int64(max(1, k.auditShards))
	return (k.auditMaxLen + n - 1) / n
}

// indexCap is the cap of one instance index shard.
func (k keys) indexCap() int64 {
	n := int64(max(1, k.instanceShards))
	return (k.maxInstances + n - 1) / n
}

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	m := d.Milliseconds()
	if m == 0 {
		return 1
	}
	return m
}

// bound cuts rec.Output to MaxOutput bytes on a rune boundary.
func (r *client) bound(rec *TaskRecord) {
	if len(rec.Output) <= r.o.MaxOutput {
		return
	}
	rec.Output = utf8cut.Head(rec.Output, r.o.MaxOutput)
	rec.Truncated = true
}

func decodeRecord(id, js string, status, owner string, attempts int64) (TaskRecord, error) {
	var rec TaskRecord
	if js != "" {
		if err := json.Unmarshal([]byte(js), &rec); err != nil {
			return TaskRecord{}, fmt.Errorf("state: decode task %s: %w", id, err)
		}
	}
	rec.ID = id
	rec.Status = status
	rec.Owner = owner
	rec.Attempts = int(attempts)
	return rec, nil
}

// withScript sends the commands of before and then s (by EVALSHA) in one
// pipeline: one round trip where a standalone server or a cluster node
// holds them all (a cluster client splits the pipeline per node). A server
// without the script cached gets it by EVAL in a second call.
func (r *client) withScript(ctx context.Context, before func(redis.Pipeliner), s *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	return r.withCalls(ctx, nil, before, s, keys, args...)
}

// withCalls is withScript with calls sent first in the same pipeline.
// Each call's outcome goes to its Done, not into the error returned: that
// is of before's commands and s.
func (r *client) withCalls(ctx context.Context, calls []Call, before func(redis.Pipeliner), s *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	var cmd *redis.Cmd
	ccmds := make([]*redis.Cmd, len(calls))
	cmds, _ := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			ccmds[i] = c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
		}
		if before != nil {
			before(p)
		}
		cmd = s.EvalSha(ctx, p, keys, args...)
		return nil
	})
	for i, c := range calls {
		err := ccmds[i].Err()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Not run: the server lost its script cache.
			err = c.Script.Eval(ctx, r.c, c.Keys, c.Args...).Err()
		}
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		if c.Done != nil {
			c.Done(err)
		}
	}
	if cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = s.Eval(ctx, r.c, keys, args...)
		return cmd, cmd.Err()
	}
	for _, c := range cmds[len(calls):] {
		if err := c.Err(); err != nil {
			return nil, err
		}
	}
	return cmd, nil
}

// Close drops the connections kept for the hand-off reads. The client is
// the caller's and stays open.
func (r *RedisHandoff) Close() error {
	r.hand.close()
	r.handTasks.close()
	return nil
}
