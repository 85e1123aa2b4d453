package alertintake

import (
	"context"
	"log/slog"

	"github.com/autodiag/autodiag/agent/redact"
)

// redactingHandler redacts the message and every string or error
// attribute of a record before the handler below writes it: the intake
// logs details of rejected alerts, which quote the alert's own values.
type redactingHandler struct {
	slog.Handler
	red *redact.Redactor
}

// redactingLogger is log with every line redacted by red (nil: log).
func redactingLogger(log *slog.Logger, red *redact.Redactor) *slog.Logger {
	if red == nil {
		return log
	}
	return slog.New(redactingHandler{Handler: log.Handler(), red: red})
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.red.RedactString(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.red.RedactString(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.attr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.red.RedactString(err.Error()))
		}
	}
	return a
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.attr(a)
	}
	return redactingHandler{Handler: h.Handler.WithAttrs(out), red: h.red}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{Handler: h.Handler.WithGroup(name), red: h.red}
}
