package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
)

// TestSharedHostnameWarnedOnce: agents sharing a machine share its
// hostname, so every one of them finds it claimed by another live agent.
// Each says so once, as a warning naming the other claimants (not itself),
// that no agent wins the name, why (the machine's hostname), and the names
// that still bring tasks to it; the claim coming and going again and a
// third claimant are not warned again. Tasks naming it stay unrun (the
// placement reads the ambiguity at every beat).
func TestSharedHostnameWarnedOnce(t *testing.T) {
	var logs bytes.Buffer
	beats := []map[string][]string{
		{"box": {"i-1", "i-2"}},
		{"box": {"i-1", "i-2", "i-3"}},
		{},
		{"box": {"i-1", "i-2"}, "web.example": {"i-1", "i-9"}},
	}
	beat := 0
	p := &presence{drain: drain.New(drain.Config{}), m: newMetrics(nil, nil), log: slog.New(slog.NewJSONHandler(&logs, nil)),
		instanceID: "i-1", names: []string{"web.example", "box", "i-1"}, hostname: "box",
		claims: func(context.Context, []string) (map[string][]string, error) { return beats[beat], nil }}
	for beat = range beats {
		p.checkClaims(t.Context())
	}
	if got := p.ambiguousClaims("box"); len(got) != 2 {
		t.Errorf("box claimed by %v after the last beat; want it ambiguous (2 claimants)", got)
	}
	var warns []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == "WARN" {
			warns = append(warns, m)
		}
	}
	byHost := map[string]map[string]any{}
	for _, w := range warns {
		byHost[w["host"].(string)] = w
	}
	if len(warns) != 2 || len(byHost) != 2 {
		t.Fatalf("warnings %v; want one per ambiguous name (box, web.example)", warns)
	}
	box := byHost["box"]
	msg, _ := box["msg"].(string)
	if box["other_instances"] != "i-2" || !strings.Contains(msg, "hostname") || !strings.Contains(msg, "no agent wins") || box["answers_for"] != "web.example,i-1" {
		t.Errorf("box's warning %v; want it to name the other claimant i-2 alone, say the machine's hostname is shared and no agent wins it, and list web.example,i-1", box)
	}
	web := byHost["web.example"]
	if m, _ := web["msg"].(string); web["other_instances"] != "i-9" || strings.Contains(m, "hostname") || web["answers_for"] != "i-1" {
		t.Errorf("web.example's warning %v; want other_instances i-9, no hostname cause, answers_for i-1", web)
	}
}

// ttlStore records the TTL of each instance record write.
type ttlStore struct {
	state.InstanceStore
	mu   sync.Mutex
	ttls []time.Duration
	put  chan struct{} // sent to (without blocking) after each write
}

func (s *ttlStore) PutInstance(_ context.Context, _ state.Instance, ttl time.Duration) error {
	s.mu.Lock()
	s.ttls = append(s.ttls, ttl)
	s.mu.Unlock()
	select {
	case s.put <- struct{}{}:
	default:
	}
	return nil
}

// TestDrainedRecordOutlivesTargetWait: a running agent's record lives
// instanceTTL; once drained, its record (and the names in it) lives
// queue.target_wait, the last write at exit included, so a host-local task
// for the departed machine ends target_draining at once rather than
// waiting queue.target_wait for an agent that is not coming back.
func TestDrainedRecordOutlivesTargetWait(t *testing.T) {
	const targetWait = 5 * time.Minute
	store := &ttlStore{put: make(chan struct{}, 1)}
	d := drain.New(drain.Config{})
	p := &presence{store: store, storeTimeout: time.Second, drain: d, outcomes: noneInFlight{}, m: newMetrics(nil, nil),
		log: slog.New(slog.DiscardHandler), instanceID: "i-1", drainedTTL: max(drainedInstanceTTL, targetWait)}
	done := make(chan struct{})
	ran := make(chan struct{})
	go func() { defer close(ran); p.run(t.Context(), done) }()
	<-store.put // the running agent's first write
	d.Start(drain.Trigger{Source: "test"})
	d.Finish()
	drainedPresence{p}.Drained(t.Context())
	close(done)
	<-ran
	if n := len(store.ttls); n < 3 {
		t.Fatalf("%d record writes, want the first, the drained one and the last", n)
	}
	if store.ttls[0] != instanceTTL {
		t.Errorf("a running agent's record lives %s, want %s", store.ttls[0], instanceTTL)
	}
	for i, ttl := range store.ttls[len(store.ttls)-2:] {
		if ttl != targetWait {
			t.Errorf("drained write %d lives %s, want queue.target_wait %s", i, ttl, targetWait)
		}
	}
}
