package state

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// RedisLeases takes, renews and gives back the execution leases of tasks,
// writing the running record with the lease in one script.
type RedisLeases struct{ *client }

// RedisRecords ends task records (Finish, with its extras in the same
// round trip), reads them and keeps the marks of rejected messages.
type RedisRecords struct{ *client }

// RedisAudit is the capped audit stream (P audit or its shards).
type RedisAudit struct{ *client }

// RedisPresence keeps each agent's instance record, the instance and
// in-service indexes, the host-name index and the persisted drains.
type RedisPresence struct {
	*client
	// trimDue is when PutInstance next trims the instance index (Unix ms
	// of the store's clock; 0 = at the next write).
	trimDue atomic.Int64
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

// indexTrimEvery spaces one writer's trims of the instance index: every
// agent writes its entry every few seconds, and the trim (two removals
// and the TTL) is housekeeping that any writer's pass does for all.
const indexTrimEvery = time.Minute

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

// TaskKey is the key of a task record, for tools that read it directly.
func (r *RedisRecords) TaskKey(id string) string { return r.k.task(id) }

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

func (r *RedisLeases) runningTTL(lease time.Duration) int64 {
	return ms(r.o.RecordTTL + 4*lease)
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

// Claim implements LeaseStore.
func (r *RedisLeases) Claim(ctx context.Context, rec TaskRecord, owner string, lease time.Duration) (Claim, error) {
	return wait(ctx, r, "claim", rec.ID, func(ctx context.Context) (Claim, error) {
		c, _, err := r.claim(ctx, rec, owner, lease, nil)
		return c, err
	})
}

// Then is a script of another component on the same Redis that runs in
// the claim's script, right after it and only when the claim succeeds
// (ClaimThen): its Lua source, run as a function with its own KEYS and
// ARGV, and those.
type Then struct {
	Source string
	Keys   []string
	Args   []any
}

// ClaimThen is Claim with then run in the same script, atomically after
// the lease is taken and only then: one round trip for both. folded is
// false, and nothing is sent, where one script cannot reach every key (a
// Cluster or Ring): make the two calls then. reply is then's reply, when
// the claim succeeded; nil when then failed with an error (make its call
// on its own then, which meets the error again and handles it).
func (r *RedisLeases) ClaimThen(ctx context.Context, rec TaskRecord, owner string, lease time.Duration, then Then) (c Claim, reply any, folded bool, err error) {
	if !r.oneNode {
		return Claim{}, nil, false, nil
	}
	type claimed struct {
		c     Claim
		reply any
	}
	v, err := wait(ctx, r, "claim", rec.ID, func(ctx context.Context) (claimed, error) {
		c, reply, err := r.claim(ctx, rec, owner, lease, &then)
		return claimed{c, reply}, err
	})
	return v.c, v.reply, true, err
}

// claimThenLua is claim.lua and the source of a Then as one script: KEYS
// and ARGV are the claim's, then then's; ARGV[1] and ARGV[2] give the
// claim's counts. The reply is claim.lua's, with then's reply appended
// when the claim succeeded and then ran without a Lua error (an error
// leaves the claim standing and then's reply out: what it wrote before
// the error stays, as with any script).
const claimThenLua = `local function claim(KEYS, ARGV)
%s
end
local function after(KEYS, ARGV)
%s
end
local nk, na = tonumber(ARGV[1]), tonumber(ARGV[2])
local ck, ca, ak, aa = {}, {}, {}, {}
for i = 1, nk do ck[i] = KEYS[i] end
for i = nk + 1, #KEYS do ak[#ak + 1] = KEYS[i] end
for i = 1, na do ca[i] = ARGV[2 + i] end
for i = 3 + na, #ARGV do aa[#aa + 1] = ARGV[i] end
local r = claim(ck, ca)
if r[1] == 0 then
  local ok, v = pcall(after, ak, aa)
  if ok then r[#r + 1] = v end
end
return r
`

// thenScripts caches the combined script of each Then source.
var thenScripts sync.Map // source -> *redis.Script

// ClaimThenHash is the SHA-1 by which Redis knows the script ClaimThen
// runs for a Then of source src: what a tool reading MONITOR or
// SCRIPT-level statistics names it by.
func ClaimThenHash(src string) string { return claimThenScript(src).Hash() }

func claimThenScript(src string) *redis.Script {
	if s, ok := thenScripts.Load(src); ok {
		return s.(*redis.Script)
	}
	s, _ := thenScripts.LoadOrStore(src, redis.NewScript(fmt.Sprintf(claimThenLua, claimLua, src)))
	return s.(*redis.Script)
}

func (r *RedisLeases) claim(ctx context.Context, rec TaskRecord, owner string, lease time.Duration, then *Then) (Claim, any, error) {
	now := r.o.Clock.Now()
	rec.Status = StatusRunning
	rec.Owner = owner
	if rec.StartedAt.IsZero() {
		rec.StartedAt = now
	}
	r.bound(&rec)
	js, err := json.Marshal(rec)
	if err != nil {
		return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
	}
	entry, err := json.Marshal(InflightEntry{TaskID: rec.ID, Host: rec.Host, Diagnostic: rec.Diagnostic, StartedAt: rec.StartedAt})
	if err != nil {
		return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
	}

	ifk := r.k.inflight(owner)
	keys := []string{r.k.task(rec.ID), r.k.lease(rec.ID)}
	args := []any{owner, now.UnixMilli(), ms(lease), js, r.runningTTL(lease)}
	var cmd *redis.Cmd
	if r.oneNode {
		// One node holds every key: the script writes the in-flight entry
		// with the claim, and only for a claim that succeeds; then, when
		// given, runs in the same script (ClaimThen gives it only here).
		keys, args = append(keys, ifk), append(args, rec.ID, entry, ms(r.o.RecordTTL))
		if then == nil {
			cmd = claimScript.Run(ctx, r.c, keys, args...)
		} else {
			all := make([]any, 0, 2+len(args)+len(then.Args))
			all = append(append(append(all, len(keys), len(args)), args...), then.Args...)
			cmd = claimThenScript(then.Source).Run(ctx, r.c, append(keys, then.Keys...), all...)
		}
	} else {
		// The in-flight entry goes first, in the same round trip as the
		// claim script: see the crash-window note on Redis.
		cmd, err = r.withScript(ctx, func(p redis.Pipeliner) {
			p.HSet(ctx, ifk, rec.ID, entry)
			p.PExpire(ctx, ifk, r.o.RecordTTL)
		}, claimScript, keys, args...)
		if err != nil {
			return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
		}
	}
	res, err := cmd.Slice()
	if err != nil {
		return Claim{}, nil, fmt.Errorf("state: claim %s: %w", rec.ID, err)
	}
	code, _ := res[0].(int64)
	if code == 0 {
		attempts, _ := res[1].(int64)
		rec.Attempts = int(attempts)
		var reply any
		if then != nil && len(res) > 2 {
			reply = res[2]
		}
		return Claim{Result: Claimed, Record: rec}, reply, nil
	}

	// Not ours: the in-flight entry written above must go.
	if !r.oneNode {
		if err := r.c.HDel(ctx, ifk, rec.ID).Err(); err != nil {
			return Claim{}, nil, fmt.Errorf("state: claim %s: in-flight cleanup: %w", rec.ID, err)
		}
	}
	switch code {
	case 1:
		remaining, _ := res[1].(int64)
		js, _ := res[2].(string)
		holder, _ := res[3].(string)
		attempts, _ := res[4].(int64)
		got, err := decodeRecord(rec.ID, js, StatusRunning, holder, attempts)
		if err != nil {
			return Claim{}, nil, err
		}
		return Claim{Result: HeldElsewhere, Record: got, LeaseRemaining: time.Duration(remaining) * time.Millisecond}, nil, nil
	case 2:
		js, _ := res[1].(string)
		holder, _ := res[2].(string)
		attempts, _ := res[3].(int64)
		got, err := decodeRecord(rec.ID, js, StatusDone, holder, attempts)
		if err != nil {
			return Claim{}, nil, err
		}
		return Claim{Result: AlreadyDone, Record: got}, nil, nil
	}
	return Claim{}, nil, fmt.Errorf("state: claim %s: unexpected script reply %v", rec.ID, res)
}

// Renew implements LeaseStore.
func (r *RedisLeases) Renew(ctx context.Context, taskID, owner string, lease time.Duration) error {
	return wait0(ctx, r, "renew", taskID, func(ctx context.Context) error {
		n, err := renewScript.Run(ctx, r.c, []string{r.k.task(taskID), r.k.lease(taskID)},
			owner, r.o.Clock.Now().UnixMilli(), ms(lease), r.runningTTL(lease)).Int64()
		if err != nil {
			return fmt.Errorf("state: renew %s: %w", taskID, err)
		}
		if n == 0 {
			return ErrLeaseLost
		}
		return nil
	})
}

// Finish implements TaskStore. On a standalone server (one node holds every
// key) the record, the in-flight entry, the audit entry and x.Writes are
// one script: one round trip, all or nothing. On a cluster they live on
// different slots: the in-flight entry, the record's script and the audit
// entry go in one pipeline (one round trip per node, the nodes in
// parallel), and x.Writes in a second once the record is known written.
func (r *RedisRecords) Finish(ctx context.Context, rec TaskRecord, x FinishExtras) error {
	return wait0(ctx, r, "finish", rec.ID, func(ctx context.Context) error {
		rec.Status = StatusDone
		if rec.FinishedAt.IsZero() {
			rec.FinishedAt = r.o.Clock.Now()
		}
		r.bound(&rec)
		js, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("state: finish %s: %w", rec.ID, err)
		}
		var audit []byte
		if x.Audit != nil {
			e := *x.Audit
			if e.Time.IsZero() {
				e.Time = r.o.Clock.Now()
			}
			if audit, err = json.Marshal(e); err != nil {
				return fmt.Errorf("state: finish %s: audit: %w", rec.ID, err)
			}
		}
		var res finishReply
		if r.oneNode {
			res, err = r.finishOne(ctx, rec, js, audit, x)
		} else {
			res, err = r.finishSplit(ctx, rec, js, audit, x)
		}
		if err != nil && !errors.Is(err, ErrPartial) {
			return fmt.Errorf("state: finish %s: %w", rec.ID, err)
		}
		if res.superseded {
			return fmt.Errorf("state: finish %s attempt %d: %w", rec.ID, rec.Attempts, ErrSuperseded)
		}
		if !res.repeated && res.prev != "" && res.prev != rec.Owner {
			// The lease changed hands: the previous owner's entry is on its
			// own key, which a cluster may keep elsewhere.
			if err := r.c.HDel(ctx, r.k.inflight(res.prev), rec.ID).Err(); err != nil {
				return fmt.Errorf("state: finish %s: in-flight: %w", rec.ID, err)
			}
		}
		if err != nil {
			return fmt.Errorf("state: finish %s: %w", rec.ID, err)
		}
		return nil
	})
}

// finishReply is what finish.lua answers.
type finishReply struct {
	prev                 string
	superseded, repeated bool
	ids                  []string // of the writes, when the script made them
}

func parseFinishReply(v []any) (finishReply, error) {
	if len(v) < 4 {
		return finishReply{}, fmt.Errorf("unexpected script reply %v", v)
	}
	var f finishReply
	f.prev, _ = v[0].(string)
	sup, _ := v[2].(int64)
	rep, _ := v[3].(int64)
	f.superseded, f.repeated = sup == 1, rep == 1
	for _, id := range v[4:] {
		s, _ := id.(string)
		f.ids = append(f.ids, s)
	}
	return f, nil
}

// finishOne runs finish.lua with every key: the server is one node.
func (r *RedisRecords) finishOne(ctx context.Context, rec TaskRecord, js, audit []byte, x FinishExtras) (finishReply, error) {
	keys := []string{r.k.task(rec.ID), r.k.lease(rec.ID)}
	args := []any{js, rec.Owner, rec.Attempts, ms(r.o.RecordTTL), r.o.Clock.Now().UnixMilli(), x.ID, "", "0", "", "", 0}
	if rec.Owner != "" {
		keys = append(keys, r.k.inflight(rec.Owner))
		args[6] = rec.ID
	}
	if audit != nil {
		keys = append(keys, r.k.audit(rec.ID))
		args[7], args[8], args[9] = "1", r.k.auditCap(), audit
	}
	var stream []Write // the writes the script makes
	for _, w := range x.Writes {
		if w.Stream == nil {
			continue
		}
		fields, err := xaddFields(w.Stream)
		if err != nil {
			return finishReply{}, err
		}
		mode := ""
		if w.Stream.MaxLen > 0 {
			mode = "="
			if w.Stream.Approx {
				mode = "~"
			}
		}
		keys = append(keys, w.Stream.Stream)
		args = append(args, mode, w.Stream.MaxLen, len(fields))
		for _, f := range fields {
			args = append(args, f)
		}
		stream = append(stream, w)
	}
	args[10] = len(stream)
	var v []any
	var err error
	if len(x.Calls) == 0 {
		v, err = finishScript.Run(ctx, r.c, keys, args...).Slice()
	} else if withSources(x.Calls) {
		v, err = r.finishThen(ctx, x.Calls, keys, args)
	} else {
		var cmd *redis.Cmd
		if cmd, err = r.withCalls(ctx, x.Calls, nil, finishScript, keys, args...); err == nil {
			v, err = cmd.Slice()
		}
	}
	if err != nil {
		return finishReply{}, err
	}
	res, err := parseFinishReply(v)
	if err != nil || res.superseded || res.repeated {
		return res, err
	}
	for i, w := range stream {
		if w.Done != nil && i < len(res.ids) {
			w.Done(res.ids[i])
		}
	}
	for _, w := range x.Writes {
		if w.Stream == nil {
			w.Apply(ctx)
		}
	}
	return res, nil
}

// withSources reports whether every call gives its Lua source.
func withSources(calls []Call) bool {
	for _, c := range calls {
		if c.Source == "" {
			return false
		}
	}
	return true
}

// finishThen runs calls and then finish.lua (with keys and args) as one
// script: the calls first, each under pcall, as they would have run ahead
// of it in the pipeline; each call's Done is told its error. It returns
// finish.lua's reply.
func (r *RedisRecords) finishThen(ctx context.Context, calls []Call, keys []string, args []any) ([]any, error) {
	srcs := make([]string, len(calls))
	nk, na := len(keys), len(args)
	for i, c := range calls {
		srcs[i] = c.Source
		nk, na = nk+len(c.Keys), na+len(c.Args)
	}
	ak := make([]string, 0, nk)
	aa := make([]any, 0, 1+2*len(calls)+na)
	aa = append(aa, len(calls))
	for _, c := range calls {
		aa = append(aa, len(c.Keys), len(c.Args))
	}
	for _, c := range calls {
		ak, aa = append(ak, c.Keys...), append(aa, c.Args...)
	}
	ak, aa = append(ak, keys...), append(aa, args...)
	res, err := finishThenScript(srcs).Run(ctx, r.c, ak, aa...).Slice()
	var errs []any
	if err == nil {
		if len(res) != 2 {
			err = fmt.Errorf("unexpected script reply %v", res)
		} else {
			errs, _ = res[0].([]any)
		}
	}
	for i, c := range calls {
		cerr := err
		if cerr == nil && i < len(errs) {
			if s, _ := errs[i].(string); s != "" {
				cerr = errors.New(s)
			}
		}
		if c.Done != nil {
			c.Done(cerr)
		}
	}
	if err != nil {
		return nil, err
	}
	v, _ := res[1].([]any)
	return v, nil
}

// finishThenLua runs script calls, then finish.lua, as one script. The
// calls' sources are functions in calls (a %s per call: "calls[i] =
// function(KEYS, ARGV) … end"), finish.lua the next %s. ARGV[1] is the
// number of calls m, ARGV[2…1+2m] each call's count of keys and of
// arguments; then KEYS and ARGV hold the calls' in order, then finish's.
// The reply is {each call's error (empty when it ran), finish.lua's reply}.
const finishThenLua = `local calls = {}
%s
local function finish(KEYS, ARGV)
%s
end
local m = tonumber(ARGV[1])
local ki, ai = 0, 1 + 2 * m
local errs = {}
for i = 1, m do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local ck, ca = {}, {}
  for j = 1, nk do ck[j] = KEYS[ki + j] end
  for j = 1, na do ca[j] = ARGV[ai + j] end
  ki, ai = ki + nk, ai + na
  local ok, e = pcall(calls[i], ck, ca)
  if ok then
    errs[i] = ''
  elseif type(e) == 'table' and e.err then
    errs[i] = tostring(e.err)
  else
    errs[i] = tostring(e)
  end
end
local fk, fa = {}, {}
for j = ki + 1, #KEYS do fk[#fk + 1] = KEYS[j] end
for j = ai + 1, #ARGV do fa[#fa + 1] = ARGV[j] end
return {errs, finish(fk, fa)}
`

// finishThenScripts caches the combined script of each list of sources.
var finishThenScripts sync.Map // sources joined by NUL -> *redis.Script

// FinishThenHash is the SHA-1 by which Redis knows the script a finish
// runs with calls of the sources srcs folded in: what a tool reading
// MONITOR names it by.
func FinishThenHash(srcs ...string) string { return finishThenScript(srcs).Hash() }

func finishThenScript(srcs []string) *redis.Script {
	key := strings.Join(srcs, "\x00")
	if s, ok := finishThenScripts.Load(key); ok {
		return s.(*redis.Script)
	}
	var fns strings.Builder
	for i, src := range srcs {
		fmt.Fprintf(&fns, "calls[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, src)
	}
	s, _ := finishThenScripts.LoadOrStore(key, redis.NewScript(fmt.Sprintf(finishThenLua, fns.String(), finishLua)))
	return s.(*redis.Script)
}

// finishSplit is Finish on a cluster: the record's script and the
// in-flight entry in one pipeline, then the audit entry and, when the
// record was written, the writes in another (both skipped for a retry of
// a finish that landed). A write that fails there is made by its Apply;
// an audit entry that fails is reported as ErrPartial.
func (r *RedisRecords) finishSplit(ctx context.Context, rec TaskRecord, js, audit []byte, x FinishExtras) (finishReply, error) {
	cmd, err := r.withCalls(ctx, x.Calls, func(p redis.Pipeliner) {
		if rec.Owner != "" {
			p.HDel(ctx, r.k.inflight(rec.Owner), rec.ID)
		}
	}, finishScript, []string{r.k.task(rec.ID), r.k.lease(rec.ID)},
		js, rec.Owner, rec.Attempts, ms(r.o.RecordTTL), r.o.Clock.Now().UnixMilli(), x.ID, "", "0", "", "", 0)
	if err != nil {
		return finishReply{}, err
	}
	v, err := cmd.Slice()
	if err != nil {
		return finishReply{}, err
	}
	res, err := parseFinishReply(v)
	if err != nil || res.repeated {
		return res, err
	}
	writes := x.Writes
	if res.superseded {
		writes = nil
	}
	var auditCmd *redis.StringCmd
	cmds := make([]*redis.StringCmd, len(writes))
	if audit != nil || len(writes) > 0 {
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if audit != nil {
				auditCmd = p.XAdd(ctx, &redis.XAddArgs{Stream: r.k.audit(rec.ID), MaxLen: r.k.auditCap(), Approx: true, Values: []any{"e", audit}})
			}
			for i, w := range writes {
				if w.Stream != nil {
					cmds[i] = p.XAdd(ctx, w.Stream)
				}
			}
			return nil
		})
	}
	for i, w := range writes {
		switch c := cmds[i]; {
		case c != nil && c.Err() == nil:
			if w.Done != nil {
				w.Done(c.Val())
			}
		default:
			// Not in the pipeline, or its XADD failed: the write's own
			// path tries once more and logs a failure.
			w.Apply(ctx)
		}
	}
	if auditCmd != nil && auditCmd.Err() != nil {
		return res, fmt.Errorf("audit: %w: %w", ErrPartial, auditCmd.Err())
	}
	return res, nil
}

// xaddFields flattens a's field-value pairs into the strings XADD gets.
func xaddFields(a *redis.XAddArgs) ([]string, error) {
	str := func(v any) string {
		switch v := v.(type) {
		case string:
			return v
		case []byte:
			return string(v)
		}
		return fmt.Sprint(v)
	}
	var out []string
	switch vs := a.Values.(type) {
	case []any:
		for _, v := range vs {
			out = append(out, str(v))
		}
	case []string:
		out = append(out, vs...)
	case map[string]any:
		keys := make([]string, 0, len(vs))
		for k := range vs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, k, str(vs[k]))
		}
	default:
		return nil, fmt.Errorf("xadd %s: values of type %T", a.Stream, a.Values)
	}
	if len(out) == 0 || len(out)%2 != 0 {
		return nil, fmt.Errorf("xadd %s: %d field-value strings", a.Stream, len(out))
	}
	return out, nil
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

// release runs release.lua; ok reports whether the task was running under
// owner and is now interrupted.
func (r *RedisLeases) release(ctx context.Context, taskID, owner string) (TaskRecord, bool, error) {
	res, err := releaseScript.Run(ctx, r.c, []string{r.k.task(taskID), r.k.lease(taskID)},
		owner, ms(r.o.RecordTTL)).Slice()
	if err != nil {
		return TaskRecord{}, false, err
	}
	if code, _ := res[0].(int64); code != 1 {
		return TaskRecord{}, false, nil
	}
	js, _ := res[1].(string)
	attempts, _ := res[2].(int64)
	rec, err := decodeRecord(taskID, js, StatusInterrupted, owner, attempts)
	return rec, err == nil, err
}

// Release implements LeaseStore.
func (r *RedisLeases) Release(ctx context.Context, taskID, owner string) error {
	return wait0(ctx, r, "release", taskID, func(ctx context.Context) error {
		if _, _, err := r.release(ctx, taskID, owner); err != nil {
			return fmt.Errorf("state: release %s: %w", taskID, err)
		}
		// Whether or not the task was still ours, owner no longer runs it.
		if err := r.c.HDel(ctx, r.k.inflight(owner), taskID).Err(); err != nil {
			return fmt.Errorf("state: release %s: in-flight: %w", taskID, err)
		}
		return nil
	})
}

// InflightIDs lists the task ids in instanceID's in-flight hash as they
// are, unlike Inflight, which keeps only those still running under
// instanceID: an agent reconciling what its previous process left needs
// the entries of tasks that ended too.
func (r *RedisLeases) InflightIDs(ctx context.Context, instanceID string) ([]string, error) {
	return wait(ctx, r, "inflight", instanceID, func(ctx context.Context) ([]string, error) {
		ids, err := r.c.HKeys(ctx, r.k.inflight(instanceID)).Result()
		if err != nil {
			return nil, fmt.Errorf("state: inflight %s: %w", instanceID, err)
		}
		sort.Strings(ids)
		return ids, nil
	})
}

// Recover implements LeaseStore. It walks owner's in-flight hash; entries whose
// record is no longer running under owner (finished, taken over after lease
// expiry, or left by a crash inside Claim) are dropped without touching the
// record.
func (r *RedisLeases) Recover(ctx context.Context, owner string) ([]TaskRecord, error) {
	return wait(ctx, r, "recover", owner, func(ctx context.Context) ([]TaskRecord, error) {
		ifk := r.k.inflight(owner)
		ids, err := r.c.HKeys(ctx, ifk).Result()
		if err != nil {
			return nil, fmt.Errorf("state: recover %s: %w", owner, err)
		}
		var out []TaskRecord
		for _, id := range ids {
			rec, ok, err := r.release(ctx, id, owner)
			if err != nil {
				return out, fmt.Errorf("state: recover %s: task %s: %w", owner, id, err)
			}
			if ok {
				out = append(out, rec)
			}
			if err := r.c.HDel(ctx, ifk, id).Err(); err != nil {
				return out, fmt.Errorf("state: recover %s: in-flight: %w", owner, err)
			}
		}
		return out, nil
	})
}

// Task implements TaskStore.
func (r *RedisRecords) Task(ctx context.Context, id string) (TaskRecord, bool, error) {
	rec, err := wait(ctx, r, "task", id, func(ctx context.Context) (*TaskRecord, error) {
		v, err := r.c.HMGet(ctx, r.k.task(id), "rec", "status", "owner", "attempts", "report").Result()
		if err != nil {
			return nil, fmt.Errorf("state: task %s: %w", id, err)
		}
		status, _ := v[1].(string)
		if status == "" {
			return nil, nil
		}
		js, _ := v[0].(string)
		owner, _ := v[2].(string)
		as, _ := v[3].(string)
		attempts, _ := strconv.ParseInt(as, 10, 64)
		rec, err := decodeRecord(id, js, status, owner, attempts)
		if err != nil {
			return nil, err
		}
		if rep, _ := v[4].(string); rep != "" {
			rec.Report = json.RawMessage(rep)
		}
		return &rec, nil
	})
	if rec == nil {
		return TaskRecord{}, false, err
	}
	return *rec, true, err
}

// SetReport implements TaskStore: the report is a field of its own in the
// record's hash, so writing it races with no other write of the record.
func (r *RedisRecords) SetReport(ctx context.Context, id string, report json.RawMessage) (bool, error) {
	return wait(ctx, r, "report of", id, func(ctx context.Context) (bool, error) {
		n, err := setReportScript.Run(ctx, r.c, []string{r.k.task(id)}, string(report)).Int()
		if err != nil {
			return false, fmt.Errorf("state: report of %s: %w", id, err)
		}
		return n == 1, nil
	})
}

// Audit implements AuditLog.
func (r *RedisAudit) Audit(ctx context.Context, e AuditEntry) error {
	return wait0(ctx, r, "audit", e.TaskID, func(ctx context.Context) error {
		if e.Time.IsZero() {
			e.Time = r.o.Clock.Now()
		}
		js, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("state: audit: %w", err)
		}
		err = r.c.XAdd(ctx, &redis.XAddArgs{
			Stream: r.k.audit(e.TaskID),
			MaxLen: r.k.auditCap(),
			Approx: true,
			Values: []any{"e", js},
		}).Err()
		if err != nil {
			return fmt.Errorf("state: audit: %w", err)
		}
		return nil
	})
}

// RecentAudit implements AuditLog. With AuditShards > 1 it reads the newest
// n of every shard in one pipeline and merges them by the entries' time
// (then stream id), newest first.
func (r *RedisAudit) RecentAudit(ctx context.Context, n int) ([]AuditEntry, error) {
	return wait(ctx, r, "recent audit", "", func(ctx context.Context) ([]AuditEntry, error) {
		if n <= 0 {
			return nil, nil
		}
		if r.o.AuditShards <= 1 {
			msgs, err := r.c.XRevRangeN(ctx, r.k.auditShard(0), "+", "-", int64(n)).Result()
			if err != nil {
				return nil, fmt.Errorf("state: recent audit: %w", err)
			}
			out := make([]AuditEntry, 0, len(msgs))
			return decodeAudit(out, msgs)
		}
		cmds := make([]*redis.XMessageSliceCmd, r.o.AuditShards)
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range cmds {
				cmds[i] = p.XRevRangeN(ctx, r.k.auditShard(i), "+", "-", int64(n))
			}
			return nil
		})
		type shardEntry struct {
			e  AuditEntry
			id string // its stream id
		}
		var all []shardEntry
		for _, c := range cmds {
			msgs, err := c.Result()
			if err != nil {
				return nil, fmt.Errorf("state: recent audit: %w", err)
			}
			es, err := decodeAudit(make([]AuditEntry, 0, len(msgs)), msgs)
			if err != nil {
				return nil, err
			}
			for i, e := range es {
				all = append(all, shardEntry{e, msgs[i].ID})
			}
		}
		slices.SortFunc(all, func(a, b shardEntry) int {
			if c := b.e.Time.Compare(a.e.Time); c != 0 {
				return c
			}
			return compareStreamIDs(b.id, a.id)
		})
		merged := make([]AuditEntry, 0, min(n, len(all)))
		for _, se := range all[:min(n, len(all))] {
			merged = append(merged, se.e)
		}
		return merged, nil
	})
}

// decodeAudit appends the entries of msgs to out.
func decodeAudit(out []AuditEntry, msgs []redis.XMessage) ([]AuditEntry, error) {
	for _, m := range msgs {
		s, _ := m.Values["e"].(string)
		var e AuditEntry
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return out, fmt.Errorf("state: recent audit: entry %s: %w", m.ID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// compareStreamIDs orders two stream ids (ms-seq) by time.
func compareStreamIDs(a, b string) int {
	split := func(id string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseUint(ms, 10, 64)
		q, _ := strconv.ParseUint(seq, 10, 64)
		return m, q
	}
	am, aq := split(a)
	bm, bq := split(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(aq, bq)
}

// PutInstance implements InstanceStore. It also refreshes the TTL of the instance's
// in-flight hash, so the heartbeat keeps it alive however long tasks run.
func (r *RedisPresence) PutInstance(ctx context.Context, inst Instance, ttl time.Duration) error {
	return wait0(ctx, r, "put instance", inst.ID, func(ctx context.Context) error {
		now := r.o.Clock.Now()
		inst.SeenAt = now
		js, err := json.Marshal(inst)
		if err != nil {
			return fmt.Errorf("state: put instance %s: %w", inst.ID, err)
		}
		idx := r.k.instances(inst.ID)
		due := r.trimDue.Load()
		trim := now.UnixMilli() >= due
		_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			// The record outlives the heartbeat by GoneKeep so a vanished
			// agent is listed as gone; the index score is the heartbeat expiry.
			p.Set(ctx, r.k.instance(inst.ID), js, time.Duration(ms(ttl+GoneKeep))*time.Millisecond)
			p.ZAdd(ctx, idx, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: inst.ID})
			if trim {
				// The index always holds the writer's own live entry, so it
				// is never emptied (and recreated without a TTL) between trims.
				p.ZRemRangeByScore(ctx, idx, "-inf", "("+strconv.FormatInt(now.Add(-GoneKeep).UnixMilli(), 10))
				p.ZRemRangeByRank(ctx, idx, 0, -r.k.indexCap()-1)
				p.PExpire(ctx, idx, max(r.o.RecordTTL, ttl+GoneKeep))
				// The in-flight hash's TTL, which every claim also refreshes,
				// rides with the trim: it outlasts the time to the next one.
				p.PExpire(ctx, r.k.inflight(inst.ID), max(r.o.RecordTTL, ttl+indexTrimEvery))
			}
			r.putNames(ctx, p, inst, now, ttl, trim)
			if r.o.InService != nil {
				for _, k := range r.o.InService(inst) {
					if inst.State == InstanceInService {
						p.ZAdd(ctx, k, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: inst.ID})
					} else {
						p.ZRem(ctx, k, inst.ID)
					}
					p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
					p.PExpire(ctx, k, max(r.o.RecordTTL, ttl))
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("state: put instance %s: %w", inst.ID, err)
		}
		if trim {
			r.trimDue.CompareAndSwap(due, now.Add(indexTrimEvery).UnixMilli())
		}
		return nil
	})
}

// Instances implements InstanceStore: ids from the index (every shard, in one
// pipeline) whose heartbeat expiry is within GoneKeep of now (those past
// it listed as gone), then their records (one pipelined GET each, so
// Cluster works).
func (r *RedisPresence) Instances(ctx context.Context) ([]Instance, error) {
	return wait(ctx, r, "instances", "", func(ctx context.Context) ([]Instance, error) {
		now := r.o.Clock.Now()
		shards := make([]*redis.ZSliceCmd, r.o.InstanceShards)
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range shards {
				shards[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
					Key: r.k.instancesShard(i), Start: "(" + strconv.FormatInt(now.Add(-GoneKeep).UnixMilli(), 10), Stop: "+inf", ByScore: true,
				})
			}
			return nil
		})
		var zs []redis.Z
		for _, c := range shards {
			z, err := c.Result()
			if err != nil {
				return nil, fmt.Errorf("state: instances: %w", err)
			}
			zs = append(zs, z...)
		}
		if len(zs) == 0 {
			return nil, nil
		}
		ids := make([]string, len(zs))
		gone := make([]bool, len(zs))
		for i, z := range zs {
			ids[i], _ = z.Member.(string)
			gone[i] = z.Score <= float64(now.UnixMilli())
		}
		cmds := make([]*redis.StringCmd, len(ids))
		if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.Get(ctx, r.k.instance(id))
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("state: instances: %w", err)
		}
		var out []Instance
		for i, c := range cmds {
			s, err := c.Result()
			if errors.Is(err, redis.Nil) {
				continue // expired in Redis time
			}
			if err != nil {
				return nil, fmt.Errorf("state: instances: %s: %w", ids[i], err)
			}
			var inst Instance
			if err := json.Unmarshal([]byte(s), &inst); err != nil {
				return nil, fmt.Errorf("state: instances: decode %s: %w", ids[i], err)
			}
			if gone[i] {
				inst.State = StateGone
			}
			out = append(out, inst)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, nil
	})
}

// Inflight implements InstanceStore: the in-flight hash, filtered by the task
// records (running under instanceID), oldest first.
func (r *RedisPresence) Inflight(ctx context.Context, instanceID string) ([]InflightEntry, error) {
	return wait(ctx, r, "inflight", instanceID, func(ctx context.Context) ([]InflightEntry, error) {
		m, err := r.c.HGetAll(ctx, r.k.inflight(instanceID)).Result()
		if err != nil {
			return nil, fmt.Errorf("state: inflight %s: %w", instanceID, err)
		}
		if len(m) == 0 {
			return nil, nil
		}
		ids := make([]string, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		cmds := make([]*redis.SliceCmd, len(ids))
		if _, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HMGet(ctx, r.k.task(id), "status", "owner")
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("state: inflight %s: %w", instanceID, err)
		}
		var out []InflightEntry
		for i, c := range cmds {
			v := c.Val()
			if len(v) < 2 || v[0] != StatusRunning || v[1] != instanceID {
				continue
			}
			var e InflightEntry
			if err := json.Unmarshal([]byte(m[ids[i]]), &e); err != nil {
				return nil, fmt.Errorf("state: inflight %s: decode %s: %w", instanceID, ids[i], err)
			}
			out = append(out, e)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
		return out, nil
	})
}

// SaveDrain implements DrainStore; the record outlives its deadline by RecordTTL.
func (r *RedisPresence) SaveDrain(ctx context.Context, instanceID string, d DrainRecord) error {
	return wait0(ctx, r, "save drain", instanceID, func(ctx context.Context) error {
		js, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("state: save drain %s: %w", instanceID, err)
		}
		ttl := r.o.RecordTTL
		if left := d.Deadline.Sub(r.o.Clock.Now()); left > 0 {
			ttl += left
		}
		if err := r.c.Set(ctx, r.k.drain(instanceID), js, ttl).Err(); err != nil {
			return fmt.Errorf("state: save drain %s: %w", instanceID, err)
		}
		return nil
	})
}

// LoadDrain implements DrainStore.
func (r *RedisPresence) LoadDrain(ctx context.Context, instanceID string) (*DrainRecord, error) {
	return wait(ctx, r, "load drain", instanceID, func(ctx context.Context) (*DrainRecord, error) {
		s, err := r.c.Get(ctx, r.k.drain(instanceID)).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("state: load drain %s: %w", instanceID, err)
		}
		var d DrainRecord
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			return nil, fmt.Errorf("state: load drain %s: %w", instanceID, err)
		}
		return &d, nil
	})
}

// MarkOnce implements Marks with SET NX PX: one round trip, atomic on a
// cluster too (the key's hash tag is the mark's own).
func (r *RedisRecords) MarkOnce(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return wait(ctx, r, "mark", key, func(ctx context.Context) (bool, error) {
		err := r.c.SetArgs(ctx, r.k.mark(key), "1", redis.SetArgs{Mode: "NX", TTL: time.Duration(ms(ttl)) * time.Millisecond}).Err()
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, redis.Nil):
			return false, nil
		}
		return false, fmt.Errorf("state: mark %s: %w", key, err)
	})
}

// Ping implements InstanceStore.
func (r *RedisPresence) Ping(ctx context.Context) error {
	return wait0(ctx, r, "ping", "", func(ctx context.Context) error {
		if err := r.c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("state: ping: %w", err)
		}
		return nil
	})
}

// Close drops the connections kept for the hand-off reads. The client is
// the caller's and stays open.
func (r *RedisHandoff) Close() error {
	r.hand.close()
	r.handTasks.close()
	return nil
}
