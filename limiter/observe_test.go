package limiter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/internal/clock"
)

// TestDenialLogged: every denial and degraded decision is one log line an
// operator can act on; allowed decisions are not logged.
func TestDenialLogged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		backend Backend
		reqs    int
		want    map[string]any // expected top-level fields of the last line
		counter map[string]any // expected counters group fields
	}{
		{"rate limited", NewMemory(), 3, map[string]any{
			"msg": "limiter denied task", "level": "INFO", "host": web1.Host, "rule": "default", "limit": "daily",
			"reason": ReasonDaily, "allowed": false, "degraded": false, "redis": "up", "retry_after": (14 * time.Hour).Seconds(),
		}, map[string]any{"daily_used": float64(2), "daily_limit": float64(2), "since_last": float64(-1)}},
		{"degraded", &fakeBackend{err: errors.New("i/o timeout")}, 1, map[string]any{
			"msg": "limiter degraded, failing open", "level": "WARN", "host": web1.Host, "rule": "default",
			"reason": ReasonDegradedOpen, "allowed": true, "degraded": true, "redis": "failing", "err": "i/o timeout",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			l, err := New(rules(Rule{Name: "default", Limits: []Limit{{Daily: 2}}}), tc.backend, Options{Clock: clock.NewManual(t0), Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			for range tc.reqs {
				if _, err := l.Allow(context.Background(), web1); err != nil {
					t.Fatal(err)
				}
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d log lines, want 1 (allowed decisions are not logged):\n%s", len(lines), buf.String())
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("log field %s = %v (%T), want %v", k, got[k], got[k], v)
				}
			}
			counters, _ := got["counters"].(map[string]any)
			for k, v := range tc.counter {
				if counters[k] != v {
					t.Errorf("log counters.%s = %v, want %v", k, counters[k], v)
				}
			}
		})
	}
}

func TestMetricsLint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l, err := New(rules(Rule{Name: "default", Limits: []Limit{{Daily: 1}}}), NewMemory(), Options{Registerer: reg, Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := l.Allow(context.Background(), web1); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint %s: %s", p.Metric, p.Text)
	}
	const want = `
# HELP autodiag_limiter_decisions_total Limiter decisions by matched rule ("none" when no rule matched), decision (allowed, denied, duplicate; shadow_denied for a shadow rule that would have denied) and reason.
# TYPE autodiag_limiter_decisions_total counter
autodiag_limiter_decisions_total{decision="allowed",reason="allowed",rule="default"} 1
autodiag_limiter_decisions_total{decision="denied",reason="daily_exceeded",rule="default"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "autodiag_limiter_decisions_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(rules(), NewMemory(), Options{Registerer: reg}); err == nil {
		t.Fatal("registering twice on one registry: no error")
	}
}
