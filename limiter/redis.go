package limiter

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

//go:embed allow.lua
var allowLua string

var allowSHA = func() string {
	h := sha1.Sum([]byte(allowLua))
	return hex.EncodeToString(h[:])
}()

// scripter is the part of a go-redis client the limiter uses; *redis.Client,
// *redis.ClusterClient, *redis.Ring and a failover client all have it.
type scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...interface{}) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...interface{}) *redis.Cmd
}

var (
	_ scripter = (*redis.Client)(nil)
	_ scripter = (*redis.ClusterClient)(nil)
	_ scripter = (*redis.Ring)(nil)
	_ scripter = redis.UniversalClient(nil)
)

// Redis is the shared backend: one decision is one EVALSHA of allow.lua
// (EVAL once when the server does not have the script cached).
type Redis struct {
	c      scripter
	prefix string
}

var _ Backend = (*Redis)(nil)

// NewRedis returns a backend storing state under keys starting with prefix
// (redis.prefix, e.g. "autodiag:") in the Redis that client talks to. Any
// go-redis client fits: Client, ClusterClient, Ring, failover clients.
func NewRedis(client scripter, prefix string) *Redis {
	return &Redis{c: client, prefix: prefix}
}

// ErrBadReply means the script's reply could not be understood.
var ErrBadReply = errors.New("limiter: unexpected reply from allow.lua")

func (b *Redis) eval(ctx context.Context, o *op, timeout time.Duration) (result, error) {
	keys, argv := b.encode(o)
	if timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
	}
	cmd := b.c.EvalSha(ctx, allowSHA, keys, argv)
	if err := cmd.Err(); err != nil && isNoScript(err) {
		cmd = b.c.Eval(ctx, allowLua, keys, argv)
	}
	reply, err := cmd.Text()
	if err != nil {
		return result{}, fmt.Errorf("redis evalsha allow.lua: %w", err)
	}
	return parseReply(reply)
}

func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// keyNames builds the keys of a decision as substrings of one string (one
// allocation); unused parts are "". The order matches allow.lua's KEYS.
func (b *Redis) encode(o *op) ([]string, string) {
	var buf []byte
	n := 0
	parts := [6]bool{o.dedupeID != "", o.block > 0, o.daily > 0, o.minIvl > 0, o.winCount > 0, o.rateT > 0}
	baseLen := len(b.prefix) + len("lim:{") + len(o.tag) + len("}:")
	size := 160 + len(o.dedupeID) + len(o.host) + len(o.diag) + len(o.order)
	for _, p := range parts {
		if p {
			size += baseLen + len(o.rule) + 16
			n++
		}
	}
	buf = make([]byte, 0, size)
	var ends [7]int
	base := func() {
		buf = append(buf, b.prefix...)
		buf = append(buf, "lim:{"...)
		buf = append(buf, o.tag...)
		buf = append(buf, "}:"...)
	}
	i := 0
	mark := func() { i++; ends[i] = len(buf) }
	if parts[0] {
		base()
		buf = append(buf, "dd:"...)
		buf = append(buf, o.host...)
		buf = append(buf, ':')
		buf = append(buf, o.diag...)
		buf = append(buf, ':')
		buf = append(buf, o.dedupeID...)
		mark()
	}
	if parts[1] {
		base()
		buf = append(buf, "b:"...)
		buf = append(buf, o.rule...)
		mark()
	}
	if parts[2] {
		base()
		buf = append(buf, "d:"...)
		buf = append(buf, o.rule...)
		buf = append(buf, ':')
		buf = append(buf, o.day...)
		mark()
	}
	if parts[3] {
		base()
		buf = append(buf, "mi:"...)
		buf = append(buf, o.rule...)
		mark()
	}
	if parts[4] {
		base()
		buf = append(buf, "w:"...)
		buf = append(buf, o.rule...)
		mark()
	}
	if parts[5] {
		base()
		buf = append(buf, "r:"...)
		buf = append(buf, o.rule...)
		mark()
	}
	argStart := len(buf)
	if o.dry {
		buf = append(buf, '1')
	} else {
		buf = append(buf, '0')
	}
	for _, v := range [...]int64{o.now, o.dedupeTTL, o.block, int64(o.daily), o.dailyTTL, o.minIvl,
		int64(o.winCount), o.winPer, o.rateT, int64(o.rateCap)} {
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, v, 10)
	}
	buf = append(buf, ' ')
	if o.order == "" {
		buf = append(buf, '-')
	} else {
		buf = append(buf, o.order...)
	}
	buf = append(buf, ' ')
	buf = strconv.AppendUint(buf, o.member, 10)
	s := unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is never written again
	keys := make([]string, n)
	for k := range n {
		keys[k] = s[ends[k]:ends[k+1]]
	}
	return keys, s[argStart:]
}

// parseReply parses allow.lua's reply.
func parseReply(s string) (result, error) {
	var f [7]int64
	for i := range f {
		s = strings.TrimLeft(s, " ")
		j := strings.IndexByte(s, ' ')
		if j < 0 {
			j = len(s)
		}
		v, err := strconv.ParseInt(s[:j], 10, 64)
		if err != nil {
			return result{}, fmt.Errorf("%w: %q", ErrBadReply, s)
		}
		f[i] = v
		s = s[j:]
	}
	return result{status: int(f[0]), limit: byte(f[1]), retry: f[2], dailyUsed: f[3], since: f[4],
		winCount: f[5], level: f[6]}, nil
}
