package tracing

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestErrorLogBounded: a collector failing every batch makes one warning
// per errorLogEvery, the next one counting the failures it stands for.
func TestErrorLogBounded(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := newErrorLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	e.now = func() time.Time { return now }
	for range 30 { // a batch every 2 s for a minute
		e.handle(errors.New("collector answered 503"))
		now = now.Add(batchDelay)
	}
	e.handle(errors.New("collector answered 503"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d warnings, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `"failures":1`) || !strings.Contains(lines[1], `"failures":30`) {
		t.Errorf("warnings %v, want 1 then 30 failures", lines)
	}
}
