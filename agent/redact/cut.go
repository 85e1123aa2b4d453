package redact

import (
	"bytes"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
)

// CutSlack is how many bytes past a cap a caller reads before redacting
// and cutting: a secret that starts before the cap and ends within the
// slack is whole when the rules see it, so the cut never leaves half a
// secret that no rule recognises. Longer secrets than this are PEM blocks,
// whose rule redacts a BEGIN without its END.
const CutSlack = 8 << 10

var markerStart = []byte("[REDACTED:")

// Head is the first limit bytes at most of redacted text, cut on a rune
// boundary and never inside a marker (a marker the cap would split is
// left out whole).
func Head(b []byte, limit int) []byte {
	if len(b) <= limit {
		return b
	}
	h := utf8cut.Head(b, limit)
	if i := bytes.LastIndex(h, markerStart); i >= 0 && bytes.IndexByte(h[i:], ']') < 0 {
		h = h[:i]
	}
	return h
}

// RedactCut redacts src, then cuts the result to limit bytes (Head): what
// a sink keeps is cut from text that is already redacted. cut reports
// whether anything was left out.
func (r *Redactor) RedactCut(src []byte, limit int) (out []byte, cut bool) {
	red := r.Redact(src)
	out = Head(red, limit)
	return out, len(out) < len(red)
}
