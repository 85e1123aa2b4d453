package state_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// hostNamesStore is a store whose instance records carry names.
type hostNamesStore interface {
	state.HostNames
	PutInstance(ctx context.Context, inst state.Instance, ttl time.Duration) error
	HostClaims(ctx context.Context, names []string) (map[string][]string, error)
}

// TestHostOwner: a name is owned by the one live agent that claims it,
// with that agent's state and names; by nobody once its heartbeat lapsed;
// and claimed by two live agents it is ambiguous, naming both.
func TestHostOwner(t *testing.T) {
	stores := map[string]func(clk clock.Clock) hostNamesStore{
		"memory": func(clk clock.Clock) hostNamesStore { return state.NewMemory(state.MemoryOptions{Clock: clk}) },
	}
	for name, c := range redisClients(t) {
		stores["redis-"+name] = func(clk clock.Clock) hostNamesStore {
			return state.NewRedis(c, state.RedisOptions{Prefix: uniquePrefix(t, c), Clock: clk})
		}
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			clk := clock.NewManual(time.Now())
			s := open(clk)
			const hbTTL = 30 * time.Second
			a := state.Instance{ID: "i-a", State: "running", Names: []string{"ip-10-0-1-5.ec2.internal", "i-a", "10.0.1.5"}}
			if err := s.PutInstance(ctx, a, hbTTL); err != nil {
				t.Fatal(err)
			}
			for _, n := range a.Names {
				o, ok, err := s.HostOwner(ctx, n)
				if err != nil || !ok || o.ID != "i-a" || o.State != "running" || !slices.Equal(o.Names, a.Names) {
					t.Fatalf("owner of %s = %+v, %v, %v; want i-a running with its names", n, o, ok, err)
				}
			}
			if _, ok, err := s.HostOwner(ctx, "web-9"); ok || err != nil {
				t.Fatalf("owner of an unclaimed name = %v, %v; want none", ok, err)
			}
			b := state.Instance{ID: "i-b", State: "draining", Names: []string{"i-b", "10.0.1.5"}}
			if err := s.PutInstance(ctx, b, hbTTL); err != nil {
				t.Fatal(err)
			}
			var amb *state.AmbiguousHostError
			if _, ok, err := s.HostOwner(ctx, "10.0.1.5"); ok || !errors.As(err, &amb) || !slices.Equal(amb.IDs, []string{"i-a", "i-b"}) {
				t.Fatalf("owner of a name two live agents claim = %v, %v; want ambiguous naming i-a and i-b", ok, err)
			}
			claims, err := s.HostClaims(ctx, []string{"10.0.1.5", "i-a", "web-9"})
			if err != nil || !slices.Equal(claims["10.0.1.5"], []string{"i-a", "i-b"}) || !slices.Equal(claims["i-a"], []string{"i-a"}) || len(claims["web-9"]) != 0 {
				t.Fatalf("claims = %v, %v; want the shared name claimed by i-a and i-b, i-a's own by i-a, web-9 by none", claims, err)
			}
			if o, ok, err := s.HostOwner(ctx, "i-b"); err != nil || !ok || o.State != "draining" {
				t.Fatalf("owner of i-b = %+v, %v, %v; want i-b draining", o, ok, err)
			}
			// a's heartbeat lapses; b's is renewed: the shared name is b's.
			clk.Add(hbTTL / 2)
			if err := s.PutInstance(ctx, b, hbTTL); err != nil {
				t.Fatal(err)
			}
			clk.Add(hbTTL / 2)
			if _, ok, err := s.HostOwner(ctx, "i-a"); ok || err != nil {
				t.Fatalf("owner of a lapsed agent's name = %v, %v; want none", ok, err)
			}
			if o, ok, err := s.HostOwner(ctx, "10.0.1.5"); err != nil || !ok || o.ID != "i-b" {
				t.Fatalf("owner of the shared name after a lapsed = %+v, %v, %v; want i-b", o, ok, err)
			}
		})
	}
}

// TestRedisTaskHandoff: tasks handed to an agent are read in order, from
// a position on, with a count, and gone once forgotten.
func TestRedisTaskHandoff(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			prefix := uniquePrefix(t, c)
			s := state.NewRedis(c, state.RedisOptions{Prefix: prefix})
			for _, body := range []string{"t1", "t2", "t3"} {
				if err := s.Handoff.GiveTask(ctx, "i-2", body, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			if ttl, _ := c.PTTL(ctx, prefix+"handtasks:i-2").Result(); ttl <= 0 || ttl > time.Minute {
				t.Fatalf("handed tasks' TTL %s; want within the 1m given", ttl)
			}
			got, err := s.Handoff.TakeTasks(ctx, "i-2", "", 2, time.Second)
			if err != nil || len(got) != 2 || got[0].Body != "t1" || got[1].Body != "t2" {
				t.Fatalf("take 2 = %+v, %v; want t1, t2", got, err)
			}
			if err := s.Handoff.ForgetTasks(ctx, "i-2", got[0].ID, got[1].ID); err != nil {
				t.Fatal(err)
			}
			rest, err := s.Handoff.TakeTasks(ctx, "i-2", "", 10, 0)
			if err != nil || len(rest) != 1 || rest[0].Body != "t3" {
				t.Fatalf("take after forgetting two = %+v, %v; want t3 alone", rest, err)
			}
			// A wait cut short by its context returns nothing.
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if none, err := s.Handoff.TakeTasks(cctx, "i-2", rest[0].ID, 10, time.Minute); err != nil || len(none) != 0 {
				t.Fatalf("a cancelled take = %+v, %v; want nothing", none, err)
			}
		})
	}
}
