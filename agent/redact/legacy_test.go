package redact

import (
	"bytes"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The redaction search as it was at 0734dec, before line bounds, a line
// allowlist's answer and candidate lists were remembered (a long line of
// many candidates cost a read of the line per candidate): the reference
// the equivalence tests hold the current search to. It shares the keyword
// scan (scan) and the allowlist checks with the current code; what
// changed is how lines are found and candidates listed, which must not
// change what is found.

func (r *Redactor) legacyRedact(src []byte) ([]byte, int) {
	if r == nil || len(r.rules) == 0 || len(src) == 0 {
		return src, 0
	}
	total := 0
	for range maxPasses {
		out, n := r.legacyPass(src)
		if n == 0 {
			break
		}
		src, total = out, total+n
	}
	return src, total
}

func (r *Redactor) legacyPass(src []byte) ([]byte, int) {
	s := r.scan(src)
	next := make([][2]int, len(r.rules)) // next match of each rule at or after the last one; -1: none
	for i := range r.rules {
		next[i] = r.legacyFind(i, s, 0)
	}
	var buf bytes.Buffer
	n, last := 0, 0
	for {
		ri, end := pick(next)
		if ri < 0 {
			break
		}
		start := next[ri][0]
		if n == 0 {
			buf.Grow(len(src) + len(r.rules[ri].marker))
		}
		buf.Write(src[last:start])
		buf.Write(r.rules[ri].marker)
		r.counts.WithLabelValues(r.rules[ri].name).Inc()
		n++
		last = end
		for i, m := range next {
			if m[0] >= 0 && m[0] < end {
				next[i] = r.legacyFind(i, s, end)
			}
		}
	}
	if n == 0 {
		return src, 0
	}
	buf.Write(src[last:])
	return buf.Bytes(), n
}

func (r *Redactor) legacyFind(i int, s *scan, pos int) [2]int {
	c := &r.rules[i]
	src := s.src
	if s.everywhere || !c.hinted {
		return r.legacyCandidate(i, s, 0, len(src), pos)
	}
	hits := s.hits[i]
	for {
		k, _ := slices.BinarySearch(hits, pos)
		if k == len(hits) {
			return none
		}
		h := hits[k]
		from := bytes.LastIndexByte(src[:h], '\n') + 1
		if !c.oneLine {
			return r.legacyCandidate(i, s, from, len(src), pos)
		}
		to := len(src)
		if j := bytes.IndexByte(src[h:], '\n'); j >= 0 {
			to = h + j
		}
		if m := r.legacyCandidate(i, s, from, to, pos); m[0] >= 0 {
			return m
		}
		pos = to + 1
		if pos > len(src) {
			return none
		}
	}
}

func (r *Redactor) legacyCandidate(i int, s *scan, from, to, pos int) [2]int {
	sp := s.spans[i]
	if sp == nil || sp.to != to || sp.from > from {
		sp = &span{from: from, to: to}
		c := &r.rules[i]
		cm := c.compiled()
		for _, m := range cm.re.FindAllSubmatchIndex(s.src[from:to], -1) {
			if m[1] == m[0] { // an empty match cannot happen (Validate)
				continue
			}
			sec := secretSpan(m, c.group)
			if sec[0] < sec[1] && legacyKeep(c, cm, s.src, from, m, sec) {
				sp.secrets = append(sp.secrets, [2]int{from + sec[0], from + sec[1]})
			}
		}
		s.spans[i] = sp
	}
	k := sort.Search(len(sp.secrets), func(k int) bool { return sp.secrets[k][0] >= pos })
	if k == len(sp.secrets) {
		return none
	}
	return sp.secrets[k]
}

func legacyKeep(c *rule, cm *matcher, src []byte, from int, m []int, sec [2]int) bool {
	secret := src[from+sec[0] : from+sec[1]]
	if bytes.HasPrefix(secret, markerStart) {
		return false
	}
	if c.entropy > 0 && entropy(secret) <= c.entropy {
		return false
	}
	for _, a := range cm.allow {
		if a.never {
			continue
		}
		target := secret
		switch a.target {
		case "match":
			target = src[from+m[0] : from+m[1]]
		case "line":
			ls := bytes.LastIndexByte(src[:from+m[0]], '\n') + 1
			le := len(src)
			if j := bytes.IndexByte(src[from+m[1]:], '\n'); j >= 0 {
				le = from + m[1] + j
			}
			target = src[ls:le]
		}
		if allowed(a, target, secret) {
			return false
		}
	}
	return true
}

// equivalenceTexts are hostile and ordinary outputs on which the current
// algorithm must give what the reference gives: the benchmark's hostile
// shapes, the same with the lines joined into one, with the line
// allowlists of generic_api_key on the line, and the corpus.
func equivalenceTexts(t *testing.T, size int) []string {
	lines := []string{
		"api_key=abcdef0123456789abcdef0123456789 ",
		"password=hunter2 ",
		"Authorization: Bearer abc.def.ghi ",
		"key=Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OQ ",
		"RUN --mount=type=secret,id=x api_key=abcdef0123456789abcdef0123456789 ",
		"import { a, b } from 'x' token=Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OQ\n",
		"kind: Secret\ndata:\n  password: aHVudGVyMmh1bnRlcjI=\n",
		"x https://u:" + pemKey + "@host ",
	}
	for _, h := range hostileShapes {
		lines = append(lines, h.line)
	}
	var out []string
	for _, l := range lines {
		out = append(out, string(repeatTo(l, size)))
		out = append(out, strings.ReplaceAll(string(repeatTo(l, size)), "\n", " "))
	}
	// The corpus in one placement (TestCorpus places it every way; a
	// short line has few candidates).
	for _, s := range loadSecrets(t) {
		out = append(out, placements[2].place(s.text()))
	}
	return append(out, loadLookalikes(t)...)
}

func TestRedactMatchesLegacy(t *testing.T) {
	corpusWithoutRace(t)
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range equivalenceTexts(t, 2<<10) {
		got, n := r.redact([]byte(in))
		want, wn := r.legacyRedact([]byte(in))
		if !bytes.Equal(got, want) || n != wn {
			t.Errorf("redact(%.80q…): %d replacements, the reference %d; outputs equal: %v", in, n, wn, bytes.Equal(got, want))
		}
	}
}
