package limiter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// clusterHarness runs the conformance suite on a Redis Cluster given by
// AUTODIAG_TEST_REDIS_CLUSTER_ADDRS (scripts/redis-cluster.sh starts one):
// every decision's keys must hash to one slot or the script fails with
// CROSSSLOT. The client has the agent's ContextTimeoutEnabled, so the
// backend calls it directly and coalesces concurrent decisions.
func clusterHarness() harness {
	return harness{name: "cluster", client: func(t *testing.T) redis.UniversalClient {
		addrs := strings.Split(requireEnv(t, "AUTODIAG_TEST_REDIS_CLUSTER_ADDRS"), ",")
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("AUTODIAG_TEST_REDIS_CLUSTER_ADDRS=%v gave a %T, want a cluster client", addrs, c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("cluster %v: %v", addrs, err)
		}
		return c
	}}
}

func TestConformanceCluster(t *testing.T) { runConformance(t, clusterHarness()) }

// TestClusterKeysShareSlot: the keys of a full decision live on one slot,
// for every key kind, and the global tag is fixed.
func TestClusterKeysShareSlot(t *testing.T) {
	t.Parallel()
	c := clusterHarness().client(t)
	prefix := uniquePrefix(t)
	for _, key := range []string{KeyHost, KeyDiagnostic, KeyHostDiagnostic, KeyGlobal} {
		t.Run(key, func(t *testing.T) {
			token := randHex(6)
			cfg := rules(Rule{Name: "r" + token, Key: key, Block: time.Hour, Limits: []Limit{
				{Daily: 1}, {MinInterval: time.Minute}, {Window: &Window{Count: 5, Per: time.Minute}}, {Rate: &Rate{Count: 5, Per: time.Second}},
			}})
			l, err := New(cfg, NewRedis(c, prefix), Options{Clock: clock.NewManual(t0)})
			if err != nil {
				t.Fatal(err)
			}
			r := Request{Host: "h-" + token + ".example.com", Diagnostic: "d-" + token, DedupeKey: "e"}
			for _, ev := range []string{"e1", "e2"} { // allowed, then denied (sets the block)
				r.DedupeKey = ev
				if d, err := l.Allow(context.Background(), r); err != nil || d.Degraded {
					t.Fatalf("Allow: %+v %v", d, err)
				}
			}
			keys := scanKeys(t, c, prefix+"*"+token+"*")
			if len(keys) != 2 {
				t.Fatalf("keys %v, want 2 (dedupe mark, rule state)", keys)
			}
			slot := c.ClusterKeySlot(context.Background(), keys[0]).Val()
			for _, k := range keys[1:] {
				if s := c.ClusterKeySlot(context.Background(), k).Val(); s != slot {
					t.Fatalf("key %s in slot %d, %s in %d", keys[0], slot, k, s)
				}
			}
		})
	}
}
