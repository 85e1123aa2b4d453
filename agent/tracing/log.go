package tracing

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

const codesError = codes.Error

// LogHandler adds trace_id and span_id to every record logged with a
// context that holds a valid span context (the *Context logging calls),
// so that a task's log lines name its trace.
type LogHandler struct{ next slog.Handler }

// NewLogHandler wraps next.
func NewLogHandler(next slog.Handler) *LogHandler { return &LogHandler{next: next} }

// Enabled implements slog.Handler.
func (h *LogHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r = r.Clone()
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &LogHandler{next: h.next.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{next: h.next.WithGroup(name)}
}

// hostOf is raw's host, for a log line that must not hold a URL's path or
// query.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// errorLogEvery bounds the warnings of a collector that keeps failing:
// one line per interval, with how many failures it stands for.
const errorLogEvery = time.Minute

// errorLog logs the SDK's errors (failed exports), at most one line per
// errorLogEvery.
type errorLog struct {
	log        *slog.Logger
	now        func() time.Time
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func newErrorLog(l *slog.Logger) *errorLog { return &errorLog{log: l, now: time.Now} }

func (e *errorLog) handle(err error) {
	e.mu.Lock()
	now := e.now()
	if !e.last.IsZero() && now.Sub(e.last) < errorLogEvery {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	n := e.suppressed + 1
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.log.Warn("tracing: export failed; its spans are dropped", "err", err, "failures", n, "every", errorLogEvery.Seconds())
}
