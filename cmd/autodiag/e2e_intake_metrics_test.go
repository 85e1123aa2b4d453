package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EStandaloneListenerMetrics: `autodiag intake` serves /metrics on
// admin_addr (loopback), and an alert it routed is counted there.
func TestE2EStandaloneListenerMetrics(t *testing.T) {
	// Parallel: it waits on the listener's start and stop, on its own queue.
	t.Parallel()
	fq := newSQSFake(t, "central-metrics")
	const token = "central-token"
	in := startStandaloneListener(t, fq, token)
	got := in.addrs
	// The admin listener is up before the alert listener listens.
	admin := got["admin listening"]
	if host, _, err := net.SplitHostPort(admin); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("admin address %q (%v): want loopback, as admin_addr says", admin, err)
	}
	metrics := func() string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+admin+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	const accepted = `autodiag_alerts_total{result="accepted",source="alertmanager"} 2`
	if m := metrics(); strings.Contains(m, accepted) || !strings.Contains(m, "go_goroutines ") {
		t.Fatalf("/metrics before any alert:\n%s", m)
	}
	if code, body := postAlert(t, got["alert listener listening"], "/v1/alerts/alertmanager", token, fixture(t, "alertmanager_v4.json")); code != http.StatusOK {
		t.Fatalf("answer %d %s", code, body)
	}
	if m := metrics(); !strings.Contains(m, accepted) {
		t.Fatalf("/metrics lacks %s:\n%s", accepted, m)
	}
	first := time.Now()
	if err := in.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// The second signal only once the first was taken: the runtime folds
	// a signal sent again before it is handled into one, and the listener
	// would then stop at the end of its drain grace, not at once.
	eventually(t, standaloneDrainGrace, "the first signal taken", func() bool {
		return len(in.Logs("signal received: the alert listener answers 503 and stops")) > 0
	})
	if err := in.Signal(syscall.SIGINT); err != nil { // the second stops at once
		t.Fatal(err)
	}
	<-in.Done()
	if took := time.Since(first); took >= standaloneDrainGrace {
		t.Errorf("the listener exited %v after the first signal, not before its %v drain grace: the second did not stop it", took, standaloneDrainGrace)
	}
	if err := in.Err(); err != nil {
		t.Fatalf("standalone listener exit: %v", err)
	}
}
