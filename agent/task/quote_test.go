package task

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestQuoteID: a valid id is shown as it is; any other is quoted, escaped
// to printable ASCII and cut to at most MaxQuoted bytes.
func TestQuoteID(t *testing.T) {
	long := strings.Repeat("a", 70_000)
	tests := []struct {
		id, want string
	}{
		{"demo-1", "demo-1"},
		{"i-0abc:step:2", "i-0abc:step:2"},
		{"", ""},
		{"bad;host", `"bad;host"`},
		{"bad id/../x", `"bad id/../x"`},
		{"a\x1b]0;owned\x07", `"a\x1b]0;owned\a"`},
		{"rtl\u202eevil", `"rtl\u202eevil"`},
		{"c1\u009b", `"c1\u009b"`},
		{"bad\xffbyte", `"bad\xffbyte"`},
	}
	for _, tt := range tests {
		if got := QuoteID(tt.id); got != tt.want {
			t.Errorf("QuoteID(%q) = %s, want %s", tt.id, got, tt.want)
		}
	}
	for _, id := range []string{long, strings.Repeat("\u202e", 30_000), strings.Repeat("é", 1000) + "!", strings.Repeat("x", 129)} {
		got := QuoteID(id)
		if len(got) > MaxQuoted || !utf8.ValidString(got) || !strings.HasPrefix(got, `"`) {
			t.Errorf("QuoteID of a %d-byte id = %d bytes %q; want a quoted form of at most %d bytes", len(id), len(got), got, MaxQuoted)
		}
		if len(id) > MaxQuoted && !strings.HasSuffix(got, `bytes)`) {
			t.Errorf("QuoteID of a %d-byte id = %q; want the cut marked with the length", len(id), got)
		}
	}
}
