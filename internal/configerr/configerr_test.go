package configerr

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
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

// TestBound: a problem quotes at most MaxQuoted bytes of any value, ends
// no quoted value inside an escape, and keeps short text as it is.
func TestBound(t *testing.T) {
	long := strings.Repeat("é\x1b", 5000)
	tests := []string{
		fmt.Sprintf("must be debug or info, not %q", long),
		"unknown key " + strings.Repeat("k", 10_000),
		fmt.Sprintf("error parsing regexp: missing closing ): `%s`", strings.Repeat("(", 9000)),
		strings.Repeat("word ", 10_000),
	}
	for _, msg := range tests {
		got := Bound(msg)
		if len(got) > MaxMessage+16 {
			t.Errorf("Bound kept %d bytes", len(got))
		}
		for _, run := range strings.FieldsFunc(got, func(r rune) bool { return r == ' ' }) {
			if len(run) > MaxQuoted+4 {
				t.Errorf("Bound kept a run of %d bytes: %.60s…", len(run), run)
			}
		}
		if strings.Contains(got, `\…`) || strings.Contains(got, `\u00…`) || !utf8.ValidString(got) {
			t.Errorf("Bound cut inside an escape or a rune: %.300s", got)
		}
	}
	if short := `log_level: must be debug, not "x"`; Bound(short) != short {
		t.Errorf("Bound changed short text: %q", Bound(short))
	}
}
