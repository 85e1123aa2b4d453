package redact

import (
	"bytes"
	"sort"
	"unicode/utf8"
)

// maxDecodeLayers bounds how many encodings deep a secret is looked for:
// JSON inside a JSON string inside a URL is three.
const maxDecodeLayers = 3

// escape is one decoded escape: decoded[dec:dec+decLen] came from
// original[orig:orig+origLen].
type escape struct {
	dec, decLen, orig, origLen int
}

// layer maps positions of one decoding back to the text it decoded.
type layer []escape

// at is the index of the last escape starting at or before decoded
// position p, -1 if none.
func (l layer) at(p int) int {
	return sort.Search(len(l), func(k int) bool { return l[k].dec > p }) - 1
}

// start is where decoded byte p starts in the text decoded: a byte of an
// escape starts where the escape does.
func (l layer) start(p int) int {
	k := l.at(p)
	if k < 0 {
		return p
	}
	e := l[k]
	if p < e.dec+e.decLen {
		return e.orig
	}
	return e.orig + e.origLen + p - (e.dec + e.decLen)
}

// end is where a decoded span ending (exclusive) at q ends in the text
// decoded: past the whole escape its last byte came from.
func (l layer) end(q int) int {
	if q == 0 {
		return 0
	}
	k := l.at(q - 1)
	if k >= 0 && q-1 < l[k].dec+l[k].decLen {
		return l[k].orig + l[k].origLen
	}
	return l.start(q-1) + 1
}

// hasEscape reports whether b holds something decodeOnce would decode.
func hasEscape(b []byte) bool {
	for i := bytes.IndexAny(b, `%\`); i >= 0; {
		if _, _, ok := escapeAt(b, i); ok {
			return true
		}
		j := bytes.IndexAny(b[i+1:], `%\`)
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// escapeAt decodes the escape at b[i] (b[i] is '%' or '\'): a URL's %XX,
// or a JSON string's \" \\ \/ \b \f \n \r \t \uXXXX (a lone surrogate is
// not decoded). It returns the bytes and the escape's length.
func escapeAt(b []byte, i int) (out []byte, n int, ok bool) {
	if b[i] == '%' {
		if i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2]) {
			return []byte{unhex(b[i+1])<<4 | unhex(b[i+2])}, 3, true
		}
		return nil, 0, false
	}
	if i+1 >= len(b) {
		return nil, 0, false
	}
	switch c := b[i+1]; c {
	case '"', '\\', '/':
		return []byte{c}, 2, true
	case 'b':
		return []byte{'\b'}, 2, true
	case 'f':
		return []byte{'\f'}, 2, true
	case 'n':
		return []byte{'\n'}, 2, true
	case 'r':
		return []byte{'\r'}, 2, true
	case 't':
		return []byte{'\t'}, 2, true
	case 'u':
		if i+6 > len(b) {
			return nil, 0, false
		}
		v := rune(0)
		for _, h := range b[i+2 : i+6] {
			if !isHex(h) {
				return nil, 0, false
			}
			v = v<<4 | rune(unhex(h))
		}
		if utf8.ValidRune(v) {
			return utf8.AppendRune(nil, v), 6, true
		}
	}
	return nil, 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// decodeOnce is b with every escape decoded, and where each came from.
func decodeOnce(b []byte) ([]byte, layer) {
	var out []byte
	var l layer
	last := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '%' && b[i] != '\\' {
			continue
		}
		dec, n, ok := escapeAt(b, i)
		if !ok {
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b))
		}
		out = append(out, b[last:i]...)
		l = append(l, escape{dec: len(out), decLen: len(dec), orig: i, origLen: n})
		out = append(out, dec...)
		i += n - 1
		last = i + 1
	}
	if l == nil {
		return b, nil
	}
	return append(out, b[last:]...), l
}

// redactDecoded finds secrets in src with its URL and JSON escapes
// decoded (up to maxDecodeLayers deep) and replaces, in src, the bytes
// each came from: "%3DAIza…" or "\u003cpassword\u003ex\u003c/password…"
// keep their encoding, and the secret its marker. Text without escapes
// costs one byte search.
func (r *Redactor) redactDecoded(src []byte) ([]byte, int) {
	if r == nil || !hasEscape(src) {
		return src, 0
	}
	text := src
	var layers []layer
	for range maxDecodeLayers {
		dec, l := decodeOnce(text)
		if l == nil {
			break
		}
		text, layers = dec, append(layers, l)
	}
	if layers == nil {
		return src, 0
	}
	type span struct{ start, end, ri int } // ri < 0: a known value
	var spans []span
	r.each(text, func(ri, start, end int) { spans = append(spans, span{start, end, ri}) })
	for _, k := range knownSpans(text, r.knownForms()) {
		spans = append(spans, span{k[0], k[1], -1})
	}
	if spans == nil {
		return src, 0
	}
	for i := range spans {
		for k := len(layers) - 1; k >= 0; k-- {
			spans[i].start, spans[i].end = layers[k].start(spans[i].start), layers[k].end(spans[i].end)
		}
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var buf bytes.Buffer
	buf.Grow(len(src))
	n, last := 0, 0
	for i := 0; i < len(spans); {
		s := spans[i]
		// Secrets sharing an escape's bytes, or overlapping: one marker.
		for i++; i < len(spans) && spans[i].start < s.end; i++ {
			s.end = max(s.end, spans[i].end)
		}
		name, marker := KnownRule, []byte(Marker(KnownRule))
		if s.ri >= 0 {
			name, marker = r.rules[s.ri].name, r.rules[s.ri].marker
		}
		buf.Write(src[last:s.start])
		buf.Write(marker)
		r.counts.WithLabelValues(name).Inc()
		n++
		last = s.end
	}
	buf.Write(src[last:])
	return buf.Bytes(), n
}
