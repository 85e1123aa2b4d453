package deploy

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestUnitLimitsAndWatchdog: the unit bounds the agent's memory and tasks
// and arms the watchdog the agent feeds (WATCHDOG=1 every WatchdogSec/2,
// cmd/autodiag/notify.go), with room for a ping that is late by the
// admin check's own bound (half the ping interval).
func TestUnitLimitsAndWatchdog(t *testing.T) {
	src, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"MemoryMax", "MemoryHigh", "TasksMax", "WatchdogSec"} {
		v, ok := u.last("Service", k)
		if !ok || v == "" || strings.EqualFold(v, "infinity") {
			t.Errorf("[Service] %s = %q; want a bound", k, v)
		}
	}
	w, _ := u.last("Service", "WatchdogSec")
	d, err := time.ParseDuration(strings.Replace(strings.Replace(w, "min", "m", 1), "sec", "s", 1))
	if err != nil {
		t.Fatalf("WatchdogSec %q: %v", w, err)
	}
	if d < 30*time.Second {
		t.Errorf("WatchdogSec %s: a loaded instance could miss it; want at least 30s", d)
	}
}
