package notify

import (
	"testing"
	"time"
)

// Retry-After is read within [0, retryAfterCap]: a number of seconds that
// overflows a time.Duration is the cap, never a negative or tiny wait.
func TestRetryAfterIsBounded(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"7", 7 * time.Second}, {"-5", 0}, {"nonsense", 0},
		{"9223372037", retryAfterCap},
		{"18446744074", retryAfterCap},
		{"99999999999999999999", retryAfterCap},
		{"-99999999999999999999", 0},
	} {
		if got := retryAfter(tt.in, time.Now()); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
