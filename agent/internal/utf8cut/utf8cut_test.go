package utf8cut_test

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
)

// cases hold the cuts worth naming; TestHeadEveryOffset and
// TestTailEveryOffset cover every offset of multi-byte text besides.
var headCases = []struct {
	name string
	s    string
	n    int
	want string
}{
	{"ascii shorter", "abc", 5, "abc"},
	{"ascii exact", "abc", 3, "abc"},
	{"ascii cut", "abcdef", 4, "abcd"},
	{"empty", "", 3, ""},
	{"empty n zero", "", 0, ""},
	{"n zero", "abc", 0, ""},
	{"n negative", "abc", -1, ""},
	{"n very negative", "héllo", -100, ""},
	{"2-byte before", "aé", 1, "a"},
	{"2-byte inside", "aé", 2, "a"},
	{"2-byte after", "aé", 3, "aé"},
	{"3-byte inside", "a€b", 3, "a"},
	{"3-byte after", "a€b", 4, "a€"},
	{"4-byte inside first", "😀", 1, ""},
	{"4-byte inside last", "😀x", 4, "😀"},
	{"4-byte inside 3", "😀x", 3, ""},
	// Invalid UTF-8: a rune cut in half goes whole, stray continuation
	// bytes are cut where the budget says.
	{"stray continuation only", "\x80\x80\x80", 2, "\x80\x80"},
	{"stray continuation run", "a\x80\x80b", 2, "a\x80"},
	{"long stray run keeps the budget", "a" + strings.Repeat("\x80", 100), 50, "a" + strings.Repeat("\x80", 49)},
	{"cut rune after stray bytes", "a\x80\xe2\x82\xac", 3, "a\x80"},
	{"stray continuation before start byte", "a\x80\x80b", 3, "a\x80\x80"},
	{"truncated sequence kept whole", "x\xe2\x82", 5, "x\xe2\x82"},
	{"truncated sequence cut", "x\xe2\x82y", 2, "x"},
	{"0xff is no continuation", "a\xffb", 2, "a\xff"},
}

var tailCases = []struct {
	name string
	s    string
	n    int
	want string
}{
	{"ascii shorter", "abc", 5, "abc"},
	{"ascii exact", "abc", 3, "abc"},
	{"ascii cut", "abcdef", 4, "cdef"},
	{"empty", "", 3, ""},
	{"n zero", "abc", 0, ""},
	{"n negative", "abc", -1, ""},
	{"n very negative", "héllo", -100, ""},
	{"2-byte whole", "éa", 3, "éa"},
	{"2-byte inside", "éa", 2, "a"},
	{"3-byte inside", "a€b", 3, "b"},
	{"3-byte whole", "a€b", 4, "€b"},
	{"4-byte inside", "x😀", 3, ""},
	{"4-byte exact", "x😀", 4, "😀"},
	{"4-byte whole", "x😀", 5, "x😀"},
	// Invalid UTF-8: leading continuation bytes go, even of a whole s.
	{"leading continuation of whole", "\x80\x80ab", 10, "ab"},
	{"stray continuation only", "\x80\x80\x80", 3, ""},
	{"stray continuation run", "a\x80\x80b", 3, "b"},
	{"long stray run keeps the budget", strings.Repeat("\x80", 100) + "a", 50, strings.Repeat("\x80", 49) + "a"},
	{"truncated sequence start kept", "x\xe2\x82", 2, "\xe2\x82"},
}

func TestHead(t *testing.T) {
	for _, tc := range headCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := utf8cut.Head(tc.s, tc.n); got != tc.want {
				t.Errorf("Head(%q, %d) = %q; want %q", tc.s, tc.n, got, tc.want)
			}
			if got := utf8cut.Head([]byte(tc.s), tc.n); string(got) != tc.want {
				t.Errorf("Head([]byte(%q), %d) = %q; want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

func TestTail(t *testing.T) {
	for _, tc := range tailCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := utf8cut.Tail(tc.s, tc.n); got != tc.want {
				t.Errorf("Tail(%q, %d) = %q; want %q", tc.s, tc.n, got, tc.want)
			}
			if got := utf8cut.Tail([]byte(tc.s), tc.n); string(got) != tc.want {
				t.Errorf("Tail([]byte(%q), %d) = %q; want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

// mixed holds runes of every encoded length, so that some offset falls at
// every position inside each kind of sequence.
const mixed = "a é € 😀 ab éé €€ 😀😀 z"

// runeStarts lists the offsets at which a rune of valid s starts, and
// len(s): the boundaries, found by decoding rather than by RuneStart.
func runeStarts(s string) []int {
	var b []int
	for i := range s {
		b = append(b, i)
	}
	return append(b, len(s))
}

func TestHeadEveryOffset(t *testing.T) {
	bounds := runeStarts(mixed)
	for n := -1; n <= len(mixed)+1; n++ {
		want := 0
		for _, b := range bounds {
			if b <= n {
				want = b
			}
		}
		if got := utf8cut.Head(mixed, n); got != mixed[:want] {
			t.Errorf("Head(mixed, %d) = %q; want %q", n, got, mixed[:want])
		}
	}
}

func TestTailEveryOffset(t *testing.T) {
	bounds := runeStarts(mixed)
	for n := -1; n <= len(mixed)+1; n++ {
		want := len(mixed)
		for i := len(bounds) - 1; i >= 0; i-- {
			if len(mixed)-bounds[i] <= n {
				want = bounds[i]
			}
		}
		if got := utf8cut.Tail(mixed, n); got != mixed[want:] {
			t.Errorf("Tail(mixed, %d) = %q; want %q", n, got, mixed[want:])
		}
	}
}

// TestNamedTypes: the type parameter keeps a caller's named string or
// byte-slice type.
func TestNamedTypes(t *testing.T) {
	type text string
	type raw []byte
	h := any(utf8cut.Head(text("aé"), 2))
	tl := any(utf8cut.Tail(raw("éa"), 2))
	if got, ok := h.(text); !ok || got != "a" {
		t.Errorf("Head(text(\"aé\"), 2) = %#v; want text(\"a\")", h)
	}
	if got, ok := tl.(raw); !ok || string(got) != "a" {
		t.Errorf("Tail(raw(\"éa\"), 2) = %#v; want raw(\"a\")", tl)
	}
}

// TestHeadSharesMemory: a []byte prefix is a subslice of s, as documented,
// so a caller that appends clips its capacity first.
func TestHeadSharesMemory(t *testing.T) {
	s := []byte("abcé")
	h := utf8cut.Head(s, 4)
	if &h[0] != &s[0] || cap(h) != cap(s) {
		t.Errorf("Head returned a copy or a clipped slice; want a subslice of s")
	}
}

var seeds = []string{"", "abc", "aé", "a€b", "😀x", mixed, "\x80\x80", "a\x80\x80b", "x\xe2\x82", "\xff\xfe"}

func FuzzHead(f *testing.F) {
	for _, s := range seeds {
		for _, n := range []int{-1, 0, 1, 2, 3, 5} {
			f.Add(s, n)
		}
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := utf8cut.Head(s, n)
		if !strings.HasPrefix(s, got) {
			t.Fatalf("Head(%q, %d) = %q: not a prefix", s, n, got)
		}
		if len(got) > max(n, 0) {
			t.Fatalf("Head(%q, %d) = %q: longer than %d", s, n, got, n)
		}
		if len(got) < min(max(n, 0), len(s))-(utf8.UTFMax-1) {
			t.Fatalf("Head(%q, %d) = %q: gave up more than %d bytes of the budget", s, n, got, utf8.UTFMax-1)
		}
		if b := utf8cut.Head([]byte(s), n); !bytes.Equal(b, []byte(got)) {
			t.Fatalf("Head([]byte(%q), %d) = %q; string form gives %q", s, n, b, got)
		}
		if utf8.ValidString(s) {
			if !utf8.ValidString(got) {
				t.Fatalf("Head(%q, %d) = %q: invalid UTF-8 from valid input", s, n, got)
			}
			// On valid input no more than a rune's tail is given up.
			if len(got) <= min(n, len(s))-utf8.UTFMax {
				t.Fatalf("Head(%q, %d) = %q: cut more than a rune short", s, n, got)
			}
		}
	})
}

func FuzzTail(f *testing.F) {
	for _, s := range seeds {
		for _, n := range []int{-1, 0, 1, 2, 3, 5} {
			f.Add(s, n)
		}
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := utf8cut.Tail(s, n)
		if !strings.HasSuffix(s, got) {
			t.Fatalf("Tail(%q, %d) = %q: not a suffix", s, n, got)
		}
		if len(got) > max(n, 0) {
			t.Fatalf("Tail(%q, %d) = %q: longer than %d", s, n, got, n)
		}
		if len(got) < min(max(n, 0), len(s))-(utf8.UTFMax-1) {
			t.Fatalf("Tail(%q, %d) = %q: gave up more than %d bytes of the budget", s, n, got, utf8.UTFMax-1)
		}
		if b := utf8cut.Tail([]byte(s), n); !bytes.Equal(b, []byte(got)) {
			t.Fatalf("Tail([]byte(%q), %d) = %q; string form gives %q", s, n, b, got)
		}
		if utf8.ValidString(s) {
			if !utf8.ValidString(got) {
				t.Fatalf("Tail(%q, %d) = %q: invalid UTF-8 from valid input", s, n, got)
			}
			if len(got) <= min(n, len(s))-utf8.UTFMax {
				t.Fatalf("Tail(%q, %d) = %q: cut more than a rune short", s, n, got)
			}
		}
	})
}

// TestCutNeverSplitsAMarker: at every budget, Head ends and Tail starts
// outside each redaction marker: a marker is kept whole or left out whole.
func TestCutNeverSplitsAMarker(t *testing.T) {
	const m1, m2 = "[REDACTED:github_pat]", "[REDACTED:aws_secret_access_key]"
	s := "token " + m1 + " and é" + m2 + "[x] [REDACTED without colon] tail"
	var spans [][2]int // the markers' offsets in s
	for _, m := range []string{m1, m2} {
		i := strings.Index(s, m)
		spans = append(spans, [2]int{i, i + len(m)})
	}
	outside := func(at int) bool {
		for _, sp := range spans {
			if sp[0] < at && at < sp[1] {
				return false
			}
		}
		return true
	}
	for n := 0; n <= len(s); n++ {
		h, tl := utf8cut.Head(s, n), utf8cut.Tail(s, n)
		if !outside(len(h)) || !utf8.ValidString(h) || !strings.HasPrefix(s, h) || len(h) > n {
			t.Errorf("Head(s, %d) = %q: splits a marker or breaks the budget", n, h)
		}
		if !outside(len(s)-len(tl)) || !utf8.ValidString(tl) || !strings.HasSuffix(s, tl) || len(tl) > n {
			t.Errorf("Tail(s, %d) = %q: splits a marker or breaks the budget", n, tl)
		}
		if hb := utf8cut.Head([]byte(s), n); string(hb) != h {
			t.Errorf("Head of bytes (%d) = %q, of string %q", n, hb, h)
		}
	}
	// A budget inside the marker's first bytes leaves it out, no more.
	if got := utf8cut.Head("ab "+m1, 3+4); got != "ab " {
		t.Errorf("Head inside [REDA = %q, want %q", got, "ab ")
	}
	if got := utf8cut.Tail(m1+" yz", 5); got != " yz" {
		t.Errorf("Tail inside the marker = %q, want %q", got, " yz")
	}
	// Text that only looks like a marker's start is cut like any text.
	if got := utf8cut.Head("a [REDACTED: never closed", 8); got != "a [REDAC" {
		t.Errorf("Head of an unclosed look-alike = %q", got)
	}
}
