package harness

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestAgentConfigLoads: every shape of AgentConfig the tests and the labs
// write is a config the agent accepts.
func TestAgentConfigLoads(t *testing.T) {
	led, err := NewLedger(t.TempDir(), "mark.sh", MarkScript)
	if err != nil {
		t.Fatal(err)
	}
	full := AgentConfig{Instance: "i-1", Workers: 2, QueueURL: "http://127.0.0.1:1/1/q", DLQURL: "http://127.0.0.1:1/1/dlq",
		Visibility: time.Minute, WaitTime: 20 * time.Second, RedisAddr: "127.0.0.1:1", Prefix: "p:", RedisTimeout: time.Second,
		StateFail: "open", Ledger: led, LimiterFail: "closed", LogLevel: "debug",
		Rules:   "    - name: cap\n      key: host\n      limits: [{concurrency: 1}]\n",
		Catalog: "  - name: extra\n    command: [/bin/true]\n    timeout: 10s\n"}
	cluster := full
	cluster.RedisAddr, cluster.RedisAddrs = "", []string{"127.0.0.1:1", "127.0.0.1:2"}
	for name, yaml := range map[string]string{
		"embedded":        AgentConfig{Instance: "i-1", Workers: 1}.YAML(),
		"queue and redis": full.YAML(),
		"redis cluster":   cluster.YAML(),
		// The chaos lab's lifecycle scenes drain within a minute: no
		// diagnostic of the catalog may outlast that.
		"a one-minute drain": full.YAML() + "lifecycle:\n  sources: [signal]\n  drain_timeout: 1m\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load([]byte(yaml), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatalf("%v\n%s", err, yaml)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("%v\n%s", err, yaml)
			}
			if name == "redis cluster" && len(cfg.Redis.Addrs) != 2 {
				t.Errorf("redis.addrs %v, want the 2 seeds\n%s", cfg.Redis.Addrs, yaml)
			}
		})
	}
}

// TestLedgerCounts: keys are lines up to their tab; the first time of a
// key is its first timed line.
func TestLedgerCounts(t *testing.T) {
	l, err := NewLedger(t.TempDir(), "mark.sh", MarkScript)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := l.Counts(); err != nil || len(n) != 0 {
		t.Fatalf("before any run: %v %v, want empty", n, err)
	}
	if err := os.WriteFile(l.Path, []byte("a\t100.5\na\t200\nmark web-1\nb\t50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, first, err := l.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if n["a"] != 2 || n["b"] != 1 || n["mark web-1"] != 1 || len(n) != 3 {
		t.Errorf("counts = %v", n)
	}
	if !first["a"].Equal(time.Unix(100, 5e8)) || !first["b"].Equal(time.Unix(50, 0)) {
		t.Errorf("first = %v", first)
	}
	if _, ok := first["mark web-1"]; ok {
		t.Errorf("an untimed line has a time: %v", first)
	}
	if lost, twice := l.OnceEach([]string{"a", "b", "c"}); lost != 1 || twice != 1 {
		t.Errorf("OnceEach = %d lost, %d twice; want 1, 1", lost, twice)
	}
}

func TestSeriesAndSum(t *testing.T) {
	const m = "# HELP x_total a\nx_total 3\nx_total_created 1\ny_total{op=\"claim\",r=\"a\"} 2\ny_total{op=\"claim\",r=\"b\"} 5\ny_total{op=\"ack\"} 7\n"
	for _, tc := range []struct {
		got, want float64
	}{
		{Series(m, "x_total", ""), 3},
		{Series(m, "y_total", `op="ack"`), 7},
		{Series(m, "y_total", `op="claim"`), 0},
		{Sum(m, "y_total", `op="claim"`), 7},
		{Sum(m, "y_total"), 14},
		{Sum(m, "x_total"), 3},
		{Sum(m, "z_total"), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("got %g, want %g", tc.got, tc.want)
		}
	}
}

// TestRedisCluster: three masters that a cluster client can write to
// across slots, gone after Kill.
func TestRedisCluster(t *testing.T) {
	testenv.RedisAddr(t) // the machine runs Redis tests: redis-server is installed
	c, err := StartRedisCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	cl := c.Client()
	defer cl.Close()
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := cl.Set(t.Context(), k, k, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
	}
	seen := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		slot, err := cl.ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		seen[c.Nodes[int(slot)*len(c.Nodes)/clusterSlots].Addr] = true
	}
	if len(seen) < 2 {
		t.Errorf("six keys on %d node(s); want the slots spread", len(seen))
	}
	c.Kill()
	for _, r := range c.Nodes {
		if conn, err := new(net.Dialer).DialContext(t.Context(), "tcp", r.Addr); err == nil {
			conn.Close()
			t.Errorf("node %s listens after Kill", r.Addr)
		}
	}
}
