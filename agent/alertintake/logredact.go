package alertintake

import (
	"log/slog"

	"github.com/autodiag/autodiag/agent/redact"
)

// redactingLogger is log with every line redacted by red (nil: log): the
// intake logs details of rejected alerts, which quote the alert's own
// values.
func redactingLogger(log *slog.Logger, red *redact.Redactor) *slog.Logger {
	return redact.Logger(log, red)
}
