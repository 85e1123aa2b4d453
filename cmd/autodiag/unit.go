package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// unitStopTimeout reads TimeoutStopSec (or TimeoutSec, which sets it) from
// a systemd unit file; the last assignment wins, as in systemd. ok is false
// when the unit sets neither (systemd's default, 90s, then applies).
func unitStopTimeout(path string) (d time.Duration, infinite, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		key, val, found := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !found || strings.HasPrefix(key, "#") || strings.HasPrefix(key, ";") {
			continue
		}
		switch strings.TrimSpace(key) {
		case "TimeoutStopSec", "TimeoutSec":
			v := strings.TrimSpace(val)
			if v == "infinity" {
				d, infinite, ok = 0, true, true
				continue
			}
			if d, err = parseTimespan(v); err != nil {
				return 0, false, false, fmt.Errorf("%s:%d: %s: %w", path, line, strings.TrimSpace(key), err)
			}
			infinite, ok = false, true
		}
	}
	return d, infinite, ok, sc.Err()
}

// parseTimespan parses a systemd time span ("900", "15min", "1h 30s").
func parseTimespan(s string) (time.Duration, error) {
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"": time.Second, "s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
		"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
		"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
	}
	var total time.Duration
	rest := strings.TrimSpace(s)
	if rest == "" {
		return 0, fmt.Errorf("empty time span")
	}
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("invalid time span %q", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid time span %q", s)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := 0
		for j < len(rest) && (rest[j] >= 'a' && rest[j] <= 'z') {
			j++
		}
		unit, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("invalid time span %q: unknown unit %q", s, rest[:j])
		}
		total += time.Duration(n * float64(unit))
		rest = strings.TrimLeft(rest[j:], " ")
	}
	return total, nil
}
