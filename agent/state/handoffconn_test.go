package state_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/testenv"
)

// clientIDs counts the CLIENT ID commands a client sends.
type clientIDs struct{ n atomic.Int64 }

func (h *clientIDs) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *clientIDs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 2 && strings.EqualFold(cmd.Name(), "client") && strings.EqualFold(a[1].(string), "id") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *clientIDs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisTakeNoticesKeepsItsConnection: an idle agent's blocking reads
// run on one kept connection, so each costs one XREAD, not a CLIENT ID
// too; a read freed by a cancel (CLIENT UNBLOCK) leaves it usable, and a
// notice handed meanwhile is read on it.
func TestRedisTakeNoticesKeepsItsConnection(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	ids := &clientIDs{}
	c.AddHook(ids)
	prefix := uniquePrefix(t, c)
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	for range 3 {
		if got, err := s.Handoff.TakeNotices(t.Context(), "i-1", "", 10*time.Millisecond); err != nil || len(got) != 0 {
			t.Fatalf("take = %+v, %v; want none", got, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	timer := time.AfterFunc(50*time.Millisecond, cancel)
	if got, err := s.Handoff.TakeNotices(ctx, "i-1", "", 30*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("cancelled take = %+v, %v; want none", got, err)
	}
	timer.Stop()
	cancel()
	if err := s.PutInstance(t.Context(), state.Instance{ID: "i-1", State: "running"}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if handed, err := s.Handoff.GiveNotice(t.Context(), "i-1", "n1", time.Minute); err != nil || !handed {
		t.Fatalf("give = %v, %v", handed, err)
	}
	if got, err := s.Handoff.TakeNotices(t.Context(), "i-1", "", 30*time.Second); err != nil || len(got) != 1 || got[0].Body != "n1" {
		t.Fatalf("take = %+v, %v; want n1", got, err)
	}
	if n := ids.n.Load(); n != 1 {
		t.Fatalf("%d CLIENT ID for 5 reads; want 1 (one kept connection)", n)
	}
}
