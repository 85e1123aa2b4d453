package config

import (
	"errors"
	"testing"
)

func TestUnknownKeySuggestion(t *testing.T) {
	fields := map[string][]int{"workers": nil, "timeout": nil, "url": nil}
	for _, tc := range []struct{ key, want string }{
		{"wokers", `unknown key; did you mean "workers"?`},
		{"Workers", `unknown key; did you mean "workers"?`},
		{"timout", `unknown key; did you mean "timeout"?`},
		{"ur", `unknown key; did you mean "url"?`},
		// Far from all of them: the few keys there are instead.
		{"colour", "unknown key; the keys here are timeout, url, workers"},
	} {
		err := unknownKey(tc.key, fields)
		if !errors.Is(err, ErrUnknownKey) || err.Error() != tc.want {
			t.Errorf("unknownKey(%q) = %v, want %q", tc.key, err, tc.want)
		}
	}
	many := map[string][]int{}
	for _, k := range []string{"a1", "b2", "c3", "d4", "e5", "f6", "g7", "h8", "i9"} {
		many[k] = nil
	}
	if err := unknownKey("zzzzzzzz", many); err != ErrUnknownKey { //nolint:errorlint // the bare sentinel, nothing added
		t.Errorf("far from nine keys: %v, want the bare %v", err, ErrUnknownKey)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"", "ab", 2}, {"wokers", "workers", 1}, {"kitten", "sitting", 3}, {"same", "same", 0}} {
		if d := editDistance(tc.a, tc.b); d != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}
