package utf8cut

import "unicode/utf8"

// Head returns the longest prefix of s of at most n bytes that ends on a
// rune boundary: s itself when len(s) <= n, empty when n <= 0. The
// prefix shares s's memory; a caller appending to a []byte result clips
// its capacity first.
func Head[S ~string | ~[]byte](s S, n int) S {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Tail returns the longest suffix of s of at most n bytes that starts on a
// rune boundary: empty when n <= 0. Unlike Head, a whole s that begins
// with continuation bytes (only invalid UTF-8 does) loses them, since its
// start is no boundary: Tail(s, len(s)) trims them and nothing else.
func Tail[S ~string | ~[]byte](s S, n int) S {
	start := len(s) - min(max(n, 0), len(s))
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[start:]
}
