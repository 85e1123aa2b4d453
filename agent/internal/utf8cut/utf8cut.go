package utf8cut

import "unicode/utf8"

// Head returns the longest prefix of s of at most n bytes that does not
// end inside a rune or a redaction marker: s itself when len(s) <= n,
// empty when n <= 0. Outside markers it gives up at most utf8.UTFMax-1
// bytes of the budget, even on invalid input; a marker the cut would
// split is left out whole. The prefix shares s's memory; a caller appending to a []byte
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
		return outsideMarker(s, s[:i])
	}
	return outsideMarker(s, s[:n])
}

// outsideMarker is the prefix h of s, shortened to start of the
// redaction marker it would end inside.
func outsideMarker[S ~string | ~[]byte](s, h S) S {
	if j, _, ok := markerAround(s, len(h)); ok {
		return h[:j]
	}
	return h
}

// Tail returns the longest suffix of s of at most n bytes that does not
// start inside a rune or a redaction marker: empty when n <= 0. Outside
// markers it gives up at most utf8.UTFMax-1 bytes of the budget, even on
// invalid input; a marker the cut would split is left out whole. Unlike
// Head, a whole s that begins with continuation bytes of a rune cut off before
// it loses them, since its start is inside that rune: Tail(s, len(s))
// trims them and nothing else.
func Tail[S ~string | ~[]byte](s S, n int) S {
	start := len(s) - min(max(n, 0), len(s))
	for i := start; i < len(s) && i <= start+(utf8.UTFMax-1); i++ {
		if utf8.RuneStart(s[i]) {
			return afterMarker(s, i)
		}
	}
	// No rune starts within reach: stray continuation bytes (invalid
	// input), kept rather than cut without end.
	if len(s)-start > utf8.UTFMax-1 {
		return afterMarker(s, start)
	}
	return s[len(s):]
}

// afterMarker is s from i on, or from the end of the redaction marker i
// falls inside.
func afterMarker[S ~string | ~[]byte](s S, i int) S {
	if _, end, ok := markerAround(s, i); ok {
		return s[end:]
	}
	return s[i:]
}

// MarkerStart opens the marker the redactor puts where a secret was,
// [REDACTED:<rule>]. A cut never splits one: half a marker reads as
// text, and its rule name would be lost.
const MarkerStart = "[REDACTED:"

// maxMarker bounds a marker's length: its start, a rule name (at most 64
// bytes; 128 leaves room) and its closing bracket.
const maxMarker = len(MarkerStart) + 128 + 1

// markerAround returns the bounds [start, end) of the redaction marker
// that holds offset i strictly inside it (start < i < end); ok false when
// i is outside every marker.
func markerAround[S ~string | ~[]byte](s S, i int) (start, end int, ok bool) {
	for j := i - 1; j >= 0 && j >= i-maxMarker; j-- {
		switch s[j] {
		case ']':
			return 0, 0, false
		case '[':
			if len(s)-j < len(MarkerStart) || string(s[j:j+len(MarkerStart)]) != MarkerStart {
				return 0, 0, false
			}
			for k := j + len(MarkerStart); k < len(s) && k < j+maxMarker; k++ {
				if s[k] == ']' {
					return j, k + 1, i < k+1
				}
			}
			return 0, 0, false
		}
	}
	return 0, 0, false
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
