package state_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisTakeNoticesNeverMissesOne: the blocking reads of handed
// notices (on their kept connection) miss none, however a notice falls
// against them: handed before the first read (it reads from the stream's
// start, not "$"), between two reads (the next reads on from the last id)
// and while a read blocks (it ends at once). The block is the agent's
// (lifecycle's handoffBlock, 30 s); each read must return long before it.
func TestRedisTakeNoticesNeverMissesOne(t *testing.T) {
	const block = 30 * time.Second
	ctx := t.Context()
	// A client of its own name, so that its blocked read is told apart
	// from other tests' and agents' on a shared server.
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "autodiagtest-take-" + hex.EncodeToString(b[:])
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ClientName: name})
	t.Cleanup(func() { _ = c.Close() })
	s := state.NewRedis(c, state.RedisOptions{Prefix: uniquePrefix(t, c)})
	if err := s.PutInstance(ctx, state.Instance{ID: "i-2", State: "running"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	give := func(body string) {
		t.Helper()
		if handed, err := s.Handoff.GiveNotice(ctx, "i-2", body, time.Minute); err != nil || !handed {
			t.Fatalf("give %s = %v, %v; want handed", body, handed, err)
		}
	}
	take := func(after, want string) string {
		t.Helper()
		start := time.Now()
		got, err := s.Handoff.TakeNotices(ctx, "i-2", after, block)
		if err != nil || len(got) != 1 || got[0].Body != want {
			t.Fatalf("take after %q = %+v, %v; want %s", after, got, err, want)
		}
		if took := time.Since(start); took > block/3 {
			t.Fatalf("take of %s returned after %s; want at once, long before its %s block", want, took, block)
		}
		return got[0].ID
	}
	give("n1") // before the first read
	id := take("", "n1")
	give("n2") // between two reads
	id = take(id, "n2")

	// While a read blocks: the notice is given once the server lists the
	// read among its blocked clients.
	type result struct {
		got []state.HandedNotice
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := s.Handoff.TakeNotices(ctx, "i-2", id, block)
		done <- result{got, err}
	}()
	deadline := time.Now().Add(block / 3)
	for !blockedOnXREAD(t, c, name) {
		if time.Now().After(deadline) {
			t.Fatal("the read never blocked on the server")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	give("n3")
	select {
	case r := <-done:
		if r.err != nil || len(r.got) != 1 || r.got[0].Body != "n3" {
			t.Fatalf("blocked take = %+v, %v; want n3", r.got, r.err)
		}
	case <-time.After(block / 3):
		t.Fatalf("a notice given while the read blocked did not end it within %s", block/3)
	}
	t.Logf("the blocked read returned %s after the notice", time.Since(start))
}

// blockedOnXREAD reports whether a client named name is blocked in an
// XREAD (CLIENT LIST: flags b, cmd xread).
func blockedOnXREAD(t *testing.T, c *redis.Client, name string) bool {
	t.Helper()
	list, err := c.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " flags=b ") && strings.Contains(line, " cmd=xread") {
			return true
		}
	}
	return false
}
