package redact

import (
	"context"
	"log/slog"
)

// Logger is log with every line redacted by r (nil: log itself): the
// message and every string or error attribute, in groups too, and the
// attributes added by With. Logs that may quote what a sender or a
// diagnostic wrote (a rejected alert's detail quotes the alert's values)
// go through it.
func Logger(log *slog.Logger, r *Redactor) *slog.Logger {
	if r == nil || log == nil {
		return log
	}
	return slog.New(handler{Handler: log.Handler(), red: r})
}

// handler redacts a record before the handler below writes it.
type handler struct {
	slog.Handler
	red *Redactor
}

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.red.RedactString(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h handler) attr(a slog.Attr) slog.Attr {
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

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.attr(a)
	}
	return handler{Handler: h.Handler.WithAttrs(out), red: h.red}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{Handler: h.Handler.WithGroup(name), red: h.red}
}
