package utf8cut

import "unicode/utf8"

// Head returns the longest prefix of s of at most n bytes that does not
// end inside a rune: s itself when len(s) <= n, empty when n <= 0. It
// gives up at most utf8.UTFMax-1 bytes of the budget, even on invalid
// input. The prefix shares s's memory; a caller appending to a []byte
// result clips its capacity first.
func Head[S ~string | ~[]byte](s S, n int) S {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return s[:0]
	}
	for i := n; i >= 0 && i >= n-(utf8.UTFMax-1); i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		if i < n && i+seqLen(s[i]) <= n {
			// The rune at i ends before the cut: the bytes after it are
			// stray continuation bytes, cut where the budget says.
			break
		}
		return s[:i]
	}
	return s[:n]
}

// Tail returns the longest suffix of s of at most n bytes that does not
// start inside a rune: empty when n <= 0. It gives up at most
// utf8.UTFMax-1 bytes of the budget, even on invalid input. Unlike Head,
// a whole s that begins with continuation bytes of a rune cut off before
// it loses them, since its start is inside that rune: Tail(s, len(s))
// trims them and nothing else.
func Tail[S ~string | ~[]byte](s S, n int) S {
	start := len(s) - min(max(n, 0), len(s))
	for i := start; i < len(s) && i <= start+(utf8.UTFMax-1); i++ {
		if utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	// No rune starts within reach: stray continuation bytes (invalid
	// input), kept rather than cut without end.
	if len(s)-start > utf8.UTFMax-1 {
		return s[start:]
	}
	return s[len(s):]
}

// seqLen is the length of the UTF-8 sequence a rune-start byte b leads.
func seqLen(b byte) int {
	switch {
	case b < 0xC0:
		return 1
	case b < 0xE0:
		return 2
	case b < 0xF0:
		return 3
	}
	return 4
}
