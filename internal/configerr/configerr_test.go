package configerr

import (
	"errors"
	"io"
	"testing"
)

func TestError(t *testing.T) {
	e := Errorf("rules[0].name", "must be set: %w", io.EOF)
	if got := e.Error(); got != "rules[0].name: must be set: EOF" {
		t.Fatalf("Error() = %q", got)
	}
	e.Line = 7
	if got := e.Error(); got != "rules[0].name (line 7): must be set: EOF" {
		t.Fatalf("Error() with a line = %q", got)
	}
	if !errors.Is(e, io.EOF) {
		t.Fatal("the cause is not unwrapped")
	}
}

func TestJoinKey(t *testing.T) {
	for _, c := range []struct{ section, key, want string }{
		{"", "a", "a"}, {"a", "", "a"}, {"", "", ""}, {"a", "b.c", "a.b.c"}, {"rules", "[0].name", "rules[0].name"},
	} {
		if got := JoinKey(c.section, c.key); got != c.want {
			t.Errorf("JoinKey(%q, %q) = %q, want %q", c.section, c.key, got, c.want)
		}
	}
}
