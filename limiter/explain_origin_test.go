package limiter

import "testing"

// An origin match is part of the rule's description: without it the
// investigation rule read as matching every task.
func TestMatchStringNamesOrigin(t *testing.T) {
	for _, tc := range []struct {
		m    Match
		want string
	}{
		{Match{}, "every task"},
		{Match{Origin: []string{"investigation"}}, "origin in [investigation]"},
		{Match{Severity: []string{"high"}, Origin: []string{"investigation"}}, "severity in [high] and origin in [investigation]"},
	} {
		if got := matchString(tc.m); got != tc.want {
			t.Errorf("matchString(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}
