package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestInvalidHostNeverReachesRedis: a task whose host fails validation
// creates no limiter or task key; the only trace in Redis is its outcome in
// the audit stream.
func TestInvalidHostNeverReachesRedis(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiag-test:invalid-host:" + hex.EncodeToString(b[:]) + ":"
	ta := startAgent(t, fmt.Sprintf(`
redis: {url: "redis://%s/0", prefix: %q}
diagnostics:
  - {name: echo, command: [/bin/echo, "{host}"], timeout: 10s}
limiter:
  hosts: {allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*\.example\.com$']}
  rules: [{name: r, key: host, limits: [{daily: 5}, {window: {count: 5, per: 1m}}]}]
lifecycle: {drain_timeout: 1m}
`, addr, prefix))
	bad := []string{"evil;rm.example.com", "$(id).example.com", "`id`.example.com", "a\nb.example.com",
		"-x.example.com", "ex\u0430mple.example.com", strings.Repeat("a", 300) + ".example.com", "other.org", "web 01.example.com"}
	for _, h := range bad {
		code, out := ta.post(t, fmt.Sprintf(`{"host":%q,"diagnostic":"echo"}`, h))
		if code != http.StatusBadRequest {
			t.Fatalf("host %q: %d %v", h, code, out)
		}
	}
	// One valid task, so the scan below would see limiter and task keys if
	// the invalid ones had created any.
	ta.post(t, `{"id":"ok-1","host":"web-01.example.com","diagnostic":"echo"}`)
	waitFor(t, "valid task", func() bool { return ta.outcome(outcome.Succeeded) == 1 })

	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
	})
	var lim, task int
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		switch {
		case strings.HasPrefix(rest, "lim:"):
			lim++
			if !strings.Contains(rest, "{web-01.example.com}") {
				t.Errorf("limiter key %q is not the valid host's", k)
			}
		case strings.HasPrefix(rest, "task:") || strings.HasPrefix(rest, "lease:"):
			task++
			if !strings.Contains(rest, "{ok-1}") {
				t.Errorf("task key %q is not the valid task's", k)
			}
		}
		for _, h := range bad {
			if strings.Contains(k, h) || strings.Contains(k, "evil") || strings.Contains(k, "$(") {
				t.Errorf("key %q carries an invalid host", k)
			}
		}
	}
	if lim == 0 || task == 0 {
		t.Fatalf("scan saw %d limiter and %d task keys in %v: the check would not notice stray keys", lim, task, keys)
	}
	if up := ta.Status().RedisUp; up == nil || !*up {
		t.Errorf("status redis_up = %v with Redis answering, want true", up)
	}
	if got := ta.outcome(outcome.Rejected); got != int64(len(bad)) {
		t.Fatalf("rejected = %d, want %d", got, len(bad))
	}
}
