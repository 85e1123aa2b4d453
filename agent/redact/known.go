package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"sort"
)

// KnownRule names the marker and the metric label of a credential
// redacted by its value rather than by a rule.
const KnownRule = "known_value"

// MinKnownLen is the shortest value redacted by its value: a shorter one
// ("a", "admin", a port) would take ordinary words out of every output.
// The rules still apply to such a credential where it is assigned.
const MinKnownLen = 8

// knownSet is a list of values and the byte strings they are found as.
type knownSet struct {
	values []string
	forms  [][]byte
}

// SetKnown gives the Redactor a source of credential values that are
// redacted wherever they occur, by exact value and in their encoded forms
// (URL-escaped, JSON-escaped, base64 standard and URL-safe, also inside a
// longer base64 text such as a Basic authorization). values is asked at
// every Redact, so a credential rotated by a secrets refresh applies at
// once; its forms are computed again only when the values change. Values
// shorter than MinKnownLen are left to the rules. Call it before the
// Redactor is shared.
func (r *Redactor) SetKnown(values func() []string) {
	if r != nil {
		r.knownSrc = values
	}
}

// knownForms are the byte strings of the current known values, longest
// first; nil without any.
func (r *Redactor) knownForms() [][]byte {
	if r.knownSrc == nil {
		return nil
	}
	vals := r.knownSrc()
	if cur := r.known.Load(); cur != nil && slices.Equal(cur.values, vals) {
		return cur.forms
	}
	ks := &knownSet{values: slices.Clone(vals), forms: knownFormsOf(vals)}
	r.known.Store(ks)
	return ks.forms
}

// knownFormsOf is every form in which vals may appear in output.
func knownFormsOf(vals []string) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	add := func(f string) {
		if len(f) >= MinKnownLen && !seen[f] {
			seen[f] = true
			out = append(out, []byte(f))
		}
	}
	for _, v := range vals {
		if len(v) < MinKnownLen {
			continue
		}
		add(v)
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
		if j, err := json.Marshal(v); err == nil {
			add(string(j[1 : len(j)-1]))
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			for _, f := range base64Fragments(enc, []byte(v)) {
				add(f)
			}
		}
	}
	// Longest first: a form that holds another is replaced whole.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// base64Fragments are the characters that encode v alone in any base64
// text holding v, at each of the three byte alignments: the characters
// that also carry bits of the bytes around it are left out.
func base64Fragments(enc *base64.Encoding, v []byte) []string {
	var out []string
	for k := range 3 {
		in := append(make([]byte, k), v...)
		e := enc.EncodeToString(in)
		from := (8*k + 5) / 6
		to := 8 * len(in) / 6
		if to > from {
			out = append(out, e[from:to])
		}
	}
	return out
}

// knownSpans are the places in text where one of forms occurs, in order
// and merged where they overlap.
func knownSpans(text []byte, forms [][]byte) [][2]int {
	var spans [][2]int
	for _, f := range forms {
		for i := 0; ; {
			j := bytes.Index(text[i:], f)
			if j < 0 {
				break
			}
			spans = append(spans, [2]int{i + j, i + j + len(f)})
			i += j + len(f)
		}
	}
	if len(spans) == 0 {
		return nil
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	merged := spans[:1]
	for _, s := range spans[1:] {
		if last := &merged[len(merged)-1]; s[0] < last[1] {
			last[1] = max(last[1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// redactKnown replaces every known value in src with the KnownRule
// marker.
func (r *Redactor) redactKnown(src []byte) ([]byte, int) {
	forms := r.knownForms()
	if len(forms) == 0 {
		return src, 0
	}
	spans := knownSpans(src, forms)
	if spans == nil {
		return src, 0
	}
	marker := []byte(Marker(KnownRule))
	var buf bytes.Buffer
	buf.Grow(len(src))
	last := 0
	for _, s := range spans {
		buf.Write(src[last:s[0]])
		buf.Write(marker)
		last = s[1]
	}
	buf.Write(src[last:])
	r.counts.WithLabelValues(KnownRule).Add(float64(len(spans)))
	return buf.Bytes(), len(spans)
}
