package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunWatchdog: WATCHDOG=1 goes out every interval while the check
// passes, none while it fails, and the loop ends with its context.
func TestRunWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 30 * time.Second
		var mu sync.Mutex
		var sent []string
		healthy := true
		notify := func(s string) { mu.Lock(); sent = append(sent, s); mu.Unlock() }
		check := func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if !healthy {
				return errors.New("down")
			}
			return nil
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return len(sent) }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); runWatchdog(ctx, interval, check, notify, slog.New(slog.DiscardHandler)) }()

		time.Sleep(3*interval - time.Nanosecond)
		synctest.Wait()
		if n := count(); n != 2 {
			t.Fatalf("%d pings before the third interval; want 2", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := count(); n != 3 {
			t.Fatalf("%d pings at the third interval; want 3", n)
		}
		mu.Lock()
		healthy = false
		mu.Unlock()
		time.Sleep(5 * interval)
		synctest.Wait()
		if n := count(); n != 3 {
			t.Fatalf("%d pings while the check fails; want still 3", n)
		}
		mu.Lock()
		for _, s := range sent {
			if s != "WATCHDOG=1" {
				t.Errorf("sent %q; want WATCHDOG=1", s)
			}
		}
		mu.Unlock()
		cancel()
		<-done
	})
}

func TestRunWatchdogOffWithoutInterval(t *testing.T) {
	runWatchdog(t.Context(), 0, nil, func(string) { t.Error("pinged without WatchdogSec") }, slog.New(slog.DiscardHandler))
}

func TestHealthzCheck(t *testing.T) {
	code := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	port := addr[strings.LastIndex(addr, ":")+1:]
	for _, a := range []string{addr, "0.0.0.0:" + port, ":" + port} {
		if err := healthzCheck(a)(t.Context()); err != nil {
			t.Errorf("healthzCheck(%s) = %v; want nil", a, err)
		}
	}
	code = http.StatusServiceUnavailable
	if err := healthzCheck(addr)(t.Context()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("healthzCheck on a 503 = %v; want an error naming it", err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "120000000")
	t.Setenv("WATCHDOG_PID", "")
	if got := watchdogInterval(); got != time.Minute {
		t.Errorf("watchdogInterval with WatchdogSec=2min = %s; want 1m (half)", got)
	}
	t.Setenv("WATCHDOG_USEC", "")
	if got := watchdogInterval(); got != 0 {
		t.Errorf("watchdogInterval without WatchdogSec = %s; want 0", got)
	}
}
