package feedback

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/record.lua
	recordLua string
	// recordScript keeps a verdict once per person and logs it (see the
	// script).
	recordScript = redis.NewScript(recordLua)
)

// redisClient is what Redis uses of go-redis.
type redisClient interface {
	redis.Scripter
	XRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
}

// Redis is the Store of fleet mode. Keys (hash tag {feedback}, so the
// script's two keys share a slot on a Cluster):
//
//	<prefix>{feedback}:task:<task id>  hash: person → verdict JSON, kept for TTL
//	<prefix>{feedback}:log             stream of verdicts, MAXLEN ~ LogMax
type Redis struct {
	c      redisClient
	prefix string
	ttl    time.Duration
}

// NewRedis returns a store on c; prefix is redis.prefix, ttl how long a
// task's verdicts are kept (the record TTL).
func NewRedis(c redisClient, prefix string, ttl time.Duration) *Redis {
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	return &Redis{c: c, prefix: prefix + "{feedback}:", ttl: ttl}
}

// Record implements Store.
func (r *Redis) Record(ctx context.Context, v Verdict) (Verdict, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Verdict{}, fmt.Errorf("feedback: encode: %w", err)
	}
	res, err := recordScript.Run(ctx, r.c, []string{r.prefix + "task:" + v.TaskID, r.prefix + "log"},
		v.By, string(body), r.ttl.Milliseconds(), LogMax, "v", string(body)).Result()
	if err != nil {
		return Verdict{}, fmt.Errorf("feedback: record %s: %w", v.TaskID, err)
	}
	if s, ok := res.(string); ok {
		var old Verdict
		if err := json.Unmarshal([]byte(s), &old); err != nil {
			return Verdict{}, fmt.Errorf("feedback: read the earlier verdict of %s: %w", v.TaskID, err)
		}
		return old, ErrAlreadyRecorded
	}
	return v, nil
}

// Log implements Store.
func (r *Redis) Log(ctx context.Context) ([]Verdict, error) {
	msgs, err := r.c.XRangeN(ctx, r.prefix+"log", "-", "+", LogMax+LogMax/10).Result()
	if err != nil {
		return nil, fmt.Errorf("feedback: read the log: %w", err)
	}
	out := make([]Verdict, 0, len(msgs))
	for _, m := range msgs {
		s, _ := m.Values["v"].(string)
		var v Verdict
		if json.Unmarshal([]byte(s), &v) == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

var _ Store = (*Redis)(nil)
