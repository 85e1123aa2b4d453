package notify

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExcerpt(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "line %04d é\n", i)
	}
	long := b.String()
	for _, max := range []int{100, 1000, MaxOutputExcerpt, 2999} {
		got := Excerpt(long, max, "autodiag show t-1")
		if len(got) > max {
			t.Errorf("max %d: %d bytes", max, len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("max %d: invalid UTF-8", max)
		}
		if !strings.HasPrefix(got, "line 0000") || !strings.HasSuffix(got, "line 4999 é\n") {
			t.Errorf("max %d: head or tail lost: %q…%q", max, got[:20], got[len(got)-20:])
		}
		if !strings.Contains(got, "bytes cut; the whole output: autodiag show t-1") {
			t.Errorf("max %d: no marker", max)
		}
	}
	if got := Excerpt("short", 100, "x"); got != "short" {
		t.Errorf("short output changed: %q", got)
	}
	if got := Excerpt(long, 10, "autodiag show t-1"); len(got) > 10 {
		t.Errorf("tiny max: %q", got)
	}
}

// TestExcerptValidUTF8: an excerpt of valid UTF-8 is valid UTF-8 at every
// budget: neither the head nor the tail ends or starts inside a rune.
func TestExcerptValidUTF8(t *testing.T) {
	for _, s := range []string{strings.Repeat("é", 200), strings.Repeat("€x", 150), strings.Repeat("😀\n", 120)} {
		for max := 1; max <= len(s); max++ {
			for _, show := range []string{"", "autodiag show t1"} {
				if got := Excerpt(s, max, show); !utf8.ValidString(got) {
					t.Fatalf("Excerpt(%d runes of %q, %d, %q) = %q: invalid UTF-8", utf8.RuneCountInString(s), []rune(s)[0], max, show, got)
				}
			}
		}
	}
}
