package fakefault

import "testing"

func TestAttempt(t *testing.T) {
	for _, tt := range []struct {
		header string
		want   int
	}{
		{"attempt=1; max=3", 1},
		{"ttl=20240101T000000Z; attempt=2; max=3", 2},
		{"", 0},
		{"max=3", 0},
	} {
		if got := Attempt(tt.header); got != tt.want {
			t.Errorf("Attempt(%q) = %d, want %d", tt.header, got, tt.want)
		}
	}
}
