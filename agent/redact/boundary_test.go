package redact

import (
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
)

// sampleOf writes a random string that the parsed pattern n matches,
// preferring letters and digits where a class allows them (a token's body
// rather than its punctuation).
func sampleOf(n *syntax.Regexp, rnd *rand.Rand, sb *strings.Builder) {
	count := func(lo, hi int) int {
		if hi < 0 {
			hi = lo + 12
		}
		return lo + rnd.IntN(hi-lo+1)
	}
	switch n.Op {
	case syntax.OpLiteral:
		sb.WriteString(string(n.Rune))
	case syntax.OpCharClass:
		var alnum, printable []rune
		for i := 0; i+1 < len(n.Rune); i += 2 {
			for c := max(n.Rune[i], 0x21); c <= n.Rune[i+1] && c <= 0x7e; c++ {
				printable = append(printable, c)
				if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
					alnum = append(alnum, c)
				}
			}
		}
		switch {
		case len(alnum) > 0:
			sb.WriteRune(alnum[rnd.IntN(len(alnum))])
		case len(printable) > 0:
			sb.WriteRune(printable[rnd.IntN(len(printable))])
		case len(n.Rune) > 0:
			sb.WriteRune(n.Rune[0])
		}
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		sb.WriteByte('a' + byte(rnd.IntN(26)))
	case syntax.OpCapture, syntax.OpConcat:
		for _, s := range n.Sub {
			sampleOf(s, rnd, sb)
		}
	case syntax.OpStar:
		for range count(0, 8) {
			sampleOf(n.Sub[0], rnd, sb)
		}
	case syntax.OpPlus:
		for range count(1, 12) {
			sampleOf(n.Sub[0], rnd, sb)
		}
	case syntax.OpQuest:
		if rnd.IntN(2) == 0 {
			sampleOf(n.Sub[0], rnd, sb)
		}
	case syntax.OpRepeat:
		for range count(n.Min, n.Max) {
			sampleOf(n.Sub[0], rnd, sb)
		}
	case syntax.OpAlternate:
		sampleOf(n.Sub[rnd.IntN(len(n.Sub))], rnd, sb)
	}
}

// secretNode is the part of pattern p that holds the secret: group g, or
// (g = 0) the first group, or the whole pattern.
func secretNode(p *syntax.Regexp, g int) *syntax.Regexp {
	var found *syntax.Regexp
	var walk func(*syntax.Regexp)
	walk = func(n *syntax.Regexp) {
		if found != nil {
			return
		}
		if n.Op == syntax.OpCapture && (g == 0 || n.Cap == g) {
			found = n
			return
		}
		for _, s := range n.Sub {
			walk(s)
		}
	}
	walk(p)
	if found == nil {
		return p
	}
	return found
}

// tokenRules are the default rules that find a secret by its shape alone,
// each with a sample of it: a string the rule redacts whole when it is the
// whole text. Rules that need a key or a context before the value (an
// assignment, a header) have no sample and are left out.
func tokenRules(t testing.TB) (names, tokens []string) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(42, 7))
	for _, rl := range DefaultRules() {
		p, err := syntax.Parse(rl.Pattern, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		p = p.Simplify()
		one, err := New([]Rule{rl}, nil)
		if err != nil {
			t.Fatal(err)
		}
		node := secretNode(p, rl.SecretGroup)
		for range 40 {
			var sb strings.Builder
			sampleOf(node, rnd, &sb)
			tok := sb.String()
			if len(tok) < 8 || strings.ContainsAny(tok, " \t\r\n'\"`") {
				continue
			}
			if out := one.RedactString(tok); out == Marker(rl.Name) {
				names, tokens = append(names, rl.Name), append(tokens, tok)
				break
			}
		}
	}
	return names, tokens
}

// boundaryMarks are the punctuation a token meets in prose, paths, URLs,
// escaped JSON and markup.
// markerRE is a marker: the rule name in it (pscale_oauth…) is not a leak.
var markerRE = regexp.MustCompile(`\[REDACTED:[a-z0-9_]+\]`)

var boundaryMarks = []string{".", ",", "!", "?", "#", "/", `\`, "%", "(", ")", ":", "*"}

// Every token rule finds its token with any of the boundary marks right
// before or right after it, inside a line and at the text's edges:
// "… sk_live_….", "SG.…!", "(AIza…)", `\"npm_…\"`.
func TestTokenBoundaryMatrix(t *testing.T) {
	corpusWithoutRace(t)
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names, tokens := tokenRules(t)
	if len(names) < 100 {
		t.Fatalf("only %d token rules have a sample", len(names))
	}
	variants, misses := 0, 0
	for i, tok := range tokens {
		for _, p := range boundaryMarks {
			for _, v := range []struct{ side, text string }{
				{"before", "see " + p + tok + " now"},
				{"before", p + tok},
				{"after", "see " + tok + p + " now"},
				{"after", tok + p},
			} {
				variants++
				out := r.RedactString(v.text)
				if l := leak(markerRE.ReplaceAllString(out, ""), tok); l != "" || !strings.Contains(out, "[REDACTED:") {
					misses++
					t.Errorf("%s: %q %s the token: %q left in %q", names[i], p, v.side, l, out)
				}
			}
		}
	}
	t.Logf("boundary matrix: %d token rules × %d marks × before/after (inside a line and at the edges): %d variants, %d misses",
		len(names), len(boundaryMarks), variants, misses)
}
