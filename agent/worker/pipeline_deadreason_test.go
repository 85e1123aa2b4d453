package worker

import (
	"errors"
	"testing"

	"github.com/autodiag/autodiag/agent/task"
)

// The dead-letter attribute says the reason once, whether or not the
// error already starts with it.
func TestDeadReasonSaysTheReasonOnce(t *testing.T) {
	for _, tt := range []struct {
		reason string
		err    error
		want   string
	}{
		{"host_forbidden", &task.Error{Reason: "host_forbidden", Field: "host", Detail: "169.254.169.254"}, "host_forbidden: host: 169.254.169.254"},
		{"stale", errors.New("older than queue.max_age"), "stale: older than queue.max_age"},
	} {
		if got := deadReason(tt.reason, tt.err); got != tt.want {
			t.Errorf("deadReason(%q, %v) = %q, want %q", tt.reason, tt.err, got, tt.want)
		}
	}
}
