package agent

import (
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/clock"

	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/testenv"
	"github.com/autodiag/autodiag/limiter"
)

// TestMaxPercentCountsTheInstanceRegistry: a max_percent cap counts the
// agents the instance registry shows in service, as the agents write it
// (PutInstance every heartbeat, through inServiceKeys): agents joining
// raise the cap, an agent that begins to drain or stops heartbeating no
// longer counts, and per az each zone counts its own. On fake time.
func TestMaxPercentCountsTheInstanceRegistry(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rc.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiag-test:maxpct:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		keys, _ := rc.Keys(t.Context(), prefix+"*").Result()
		if len(keys) > 0 {
			rc.Del(t.Context(), keys...)
		}
	})
	cfg := limiter.DefaultConfig()
	cfg.Rules = []limiter.Rule{
		{Name: "fleet", Match: limiter.Match{Diagnostic: []string{"df"}}, Key: limiter.KeyDiagnostic,
			Limits: []limiter.Limit{{Concurrency: limiter.Concurrency{MaxPercent: 10}}}},
		{Name: "zone", Match: limiter.Match{Diagnostic: []string{"ps"}}, Key: limiter.KeyDiagnostic,
			Limits: []limiter.Limit{{Concurrency: limiter.Concurrency{MaxPercent: 50, Per: limiter.PerAZ}}}},
	}
	clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	store := state.NewRedis(rc, state.RedisOptions{Prefix: prefix, Clock: clk, InService: inServiceKeys(prefix, cfg.UsesPercent())})
	lim, err := limiter.New(cfg, limiter.NewRedis(rc, prefix), limiter.Options{Clock: clk, Timeout: time.Minute, AZ: "az-a"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int, az, st string) {
		t.Helper()
		inst := state.Instance{ID: fmt.Sprintf("i-%08x", i), State: st, AZ: az}
		if err := store.PutInstance(t.Context(), inst, instanceTTL); err != nil {
			t.Fatal(err)
		}
	}
	check := func(diag, id string, wantAllowed bool, wantLimit, wantAgents int) {
		t.Helper()
		d, err := lim.Allow(t.Context(), limiter.Request{Host: "h", Diagnostic: diag, TaskID: id, Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != wantAllowed || d.Counters.ConcurrencyLimit != wantLimit || d.Counters.AgentsInService != wantAgents {
			t.Fatalf("%s %s: allowed=%v limit=%d agents=%d (%s); want allowed=%v limit=%d agents=%d",
				diag, id, d.Allowed, d.Counters.ConcurrencyLimit, d.Counters.AgentsInService, d.Reason, wantAllowed, wantLimit, wantAgents)
		}
		if !wantAllowed && d.Reason != limiter.ReasonConcurrencyPercent {
			t.Fatalf("%s %s: reason %s; want %s", diag, id, d.Reason, limiter.ReasonConcurrencyPercent)
		}
	}
	for i := range 19 {
		put(i, "az-a", state.InstanceInService)
	}
	put(19, "az-b", "starting") // not in service yet
	check("df", "t1", true, 1, 19)
	check("df", "t2", false, 1, 19)
	put(19, "az-b", state.InstanceInService) // joins: 20 agents, 2 slots
	check("df", "t2", true, 2, 20)
	check("df", "t3", false, 2, 20)
	for i := 0; i < 10; i++ { // ten begin to drain: 10 agents, 1 slot
		put(i, "az-a", "draining")
	}
	check("df", "t3", false, 1, 10)
	// Per az: zone a has 9 agents in service (50 %: 4), zone b 1.
	check("ps", "p1", true, 4, 9)
	// Half a refresh period on, only agents 10-14 heartbeat again; one
	// heartbeat TTL after the rest last did, they have lapsed.
	clk.Add(instanceTTL / 2)
	for i := 10; i < 15; i++ {
		put(i, "az-a", state.InstanceInService)
	}
	clk.Add(instanceTTL / 2)
	check("ps", "p2", true, 2, 5)
	check("ps", "p3", false, 2, 5)
	check("df", "t4", false, 1, 5)
}

// TestMaxPercentConfigFile: the config file takes `concurrency:` as a
// number or {max_percent, per}; a bad key in it is an error naming the
// limit's key and line.
func TestMaxPercentConfigFile(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load([]byte(`
limiter:
  rules:
    - name: share
      key: diagnostic
      limits: [{concurrency: {max_percent: 10, per: asg}}]
    - name: runs
      limits: [{concurrency: 3}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Limiter.Rules[0].Limits[0].Concurrency; c != (limiter.Concurrency{MaxPercent: 10, Per: limiter.PerASG}) {
		t.Fatalf("decoded %+v", c)
	}
	if c := cfg.Limiter.Rules[1].Limits[0].Concurrency; c != (limiter.Concurrency{Max: 3}) {
		t.Fatalf("decoded %+v", c)
	}
	_, err = config.Load([]byte(`
limiter:
  rules:
    - name: share
      limits:
        - concurrency: {max_percent: 10, per: region}
        - concurrency: {max_pct: 10}
`), nil)
	want := []string{
		`limiter.rules[0].limits[0].concurrency.per (line 6): must be one of fleet, asg, az, got "region"`,
		`limiter.rules[0].limits[1].concurrency (line 7): max_pct: unknown key "max_pct" (max_percent, per)`,
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\nwant it to contain %s", err, w)
		}
	}
}
