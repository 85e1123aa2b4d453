package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisRecords ends task records (Finish, with its extras in the same
// round trip), reads them and keeps the marks of rejected messages.
type RedisRecords struct{ *client }

// TaskKey is the key of a task record, for tools that read it directly.
func (r *RedisRecords) TaskKey(id string) string { return r.k.task(id) }

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
