package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestTaskScriptCallsOnOneRedis: a task under a concurrency rule costs a
// standalone Redis three script calls, counted from MONITOR: the claim
// with the limiter's decision in its script, then the slot's release and
// the final record (sent in one pipeline, see state.TestRedisFinishCalls);
// no allow.lua or held.lua call of its own. The slot is free once the
// outcome is counted.
func TestTaskScriptCallsOnOneRedis(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiag-test:roundtrips:" + hex.EncodeToString(b[:]) + ":"
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ctx := context.Background()
	t.Cleanup(func() {
		if keys, _ := rc.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
	})
	ta := startAgent(t, fmt.Sprintf(`
redis: {url: "redis://%s/0", prefix: %q}
diagnostics:
  - {name: echo, command: [/bin/echo, "{host}"], timeout: 10s}
limiter:
  rules: [{name: cap, key: host, limits: [{concurrency: 2}]}]
lifecycle: {drain_timeout: 1m}
`, addr, prefix))
	// A first task loads the scripts (a cold cache costs an EVAL more).
	ta.post(t, `{"id":"rt-warm","host":"web-01","diagnostic":"echo"}`)
	waitFor(t, "warm-up task", func() bool { return ta.outcome(outcome.Succeeded) == 1 })
	const id = "rt-task-1"
	end := prefix + "end"
	got := testenv.Commands(ctx, t, addr, id, end, func() {
		ta.post(t, `{"id":"`+id+`","host":"web-01","diagnostic":"echo"}`)
		waitFor(t, "task", func() bool { return ta.outcome(outcome.Succeeded) == 2 })
	}, func() {
		if err := rc.Echo(ctx, end).Err(); err != nil {
			t.Fatal(err)
		}
	})
	var scripts []string
	for _, c := range got {
		if !strings.HasPrefix(c, "lua:") {
			scripts = append(scripts, c)
		}
	}
	if want := []string{"evalsha", "evalsha", "evalsha"}; fmt.Sprint(scripts) != fmt.Sprint(want) {
		t.Errorf("the task's calls naming it: %v, want %v (claim+decision, slot release, finish)", scripts, want)
	}
	if n, err := rc.ZCard(ctx, prefix+"lim:{web-01}:c:cap").Result(); err != nil || n != 0 {
		t.Errorf("slots held after the task ended: %d (%v), want 0", n, err)
	}
}
