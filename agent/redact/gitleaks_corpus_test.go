package redact

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// glSample is one sample of gitleaks' rule generators
// (testdata/gitleaks_samples.tsv): a true positive (tp) with its secret,
// or a false positive (fp).
type glSample struct {
	kind, rule, text, secret string
	// secretShaped marks an fp that is one for its own rule only: another
	// rule of gitleaks' shipped set flags it (a token of another product,
	// a generic key=value secret), or testdata/gitleaks_fp_judged.tsv
	// gives the reason it has a secret's shape or role. Redacting it is
	// right, so it is not held to "unchanged".
	secretShaped bool
}

// loadGitleaksSamples reads the samples and finds each tp's secret with
// the gitleaks rule that the sample was written for (its pattern as
// gitleaks ships it, secret group included). A tp its own rule does not
// match is returned with no secret, for the caller to count.
func loadGitleaksSamples(t testing.TB) []glSample {
	t.Helper()
	f, err := os.Open("testdata/gitleaks_samples.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules := map[string]glRule{}
	for _, r := range gitleaksConfig.Rules {
		rules[r.ID] = r
	}
	// gitleaks' own rule set, as it ships (patterns not widened, no rules
	// of ours): an fp it flags under another rule is a secret's shape.
	var shipped []Rule
	for _, gr := range gitleaksConfig.Rules {
		if gr.Regex == "" {
			continue
		}
		rl := Rule{Name: strings.ReplaceAll(gr.ID, "-", "_"), Pattern: gr.Regex, SecretGroup: gr.SecretGroup,
			Entropy: gr.Entropy, Keywords: gr.Keywords, Allow: []Allow{gitleaksConfig.Allowlist.allow()}}
		for _, a := range gr.Allowlists {
			rl.Allow = append(rl.Allow, a.allow())
		}
		shipped = append(shipped, rl)
	}
	gl, err := New(shipped, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The fps this project redacts on purpose, each with its reason.
	judged := map[string]bool{}
	jb, err := os.ReadFile("testdata/gitleaks_fp_judged.tsv")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(jb), "\n") {
		if f := strings.Split(l, "\t"); len(f) == 3 && !strings.HasPrefix(l, "#") {
			judged[f[0]+"\t"+f[1]] = true
		}
	}
	var out []glSample
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 || parts[0] != "tp" && parts[0] != "fp" {
			t.Fatalf("gitleaks_samples.tsv: bad line %q", line)
		}
		s := glSample{kind: parts[0], rule: parts[1]}
		if err := json.Unmarshal([]byte(parts[2]), &s.text); err != nil {
			t.Fatalf("gitleaks_samples.tsv: %q: %v", line, err)
		}
		if s.kind == "fp" {
			s.secretShaped = gl.RedactString(s.text) != s.text || judged[parts[1]+"\t"+parts[2]]
		}
		if _, ok := rules[s.rule]; !ok && s.kind == "tp" {
			// A rule gitleaks' default configuration leaves out: ours of
			// the same name delimits the secret.
			for _, r := range ownRules() {
				if r.Name == strings.ReplaceAll(s.rule, "-", "_") {
					rules[s.rule] = glRule{ID: s.rule, Regex: r.Pattern, SecretGroup: r.SecretGroup}
				}
			}
		}
		if gr, ok := rules[s.rule]; ok && s.kind == "tp" && gr.Regex != "" {
			if re, err := regexp.Compile(gr.Regex); err == nil {
				if m := re.FindStringSubmatchIndex(s.text); m != nil {
					sec := secretSpan(m, gr.SecretGroup)
					s.secret = s.text[sec[0]:sec[1]]
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// The second corpus: gitleaks' own true and false positives, for at least
// 150 rules, in every placement of the first corpus. Every tp's secret
// (as its gitleaks rule delimits it) is redacted; every fp that is not a
// secret comes out unchanged.
func TestGitleaksCorpus(t *testing.T) {
	corpusWithoutRace(t)
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	samples := loadGitleaksSamples(t)
	kinds := map[string]bool{}
	tps, fpsN, unmatched, shapedN := 0, 0, 0, 0
	for _, s := range samples {
		switch {
		case s.kind == "fp" && s.secretShaped:
			shapedN++
		case s.kind == "fp":
			fpsN++
		case s.secret == "":
			unmatched++
			t.Errorf("tp of %s is not matched by its own gitleaks rule: %q", s.rule, s.text)
		default:
			tps++
			kinds[s.rule] = true
		}
	}
	if len(kinds) < 150 || tps < 500 || fpsN < 150 {
		t.Fatalf("gitleaks corpus too small: %d kinds, %d tps, %d fps", len(kinds), tps, fpsN)
	}
	misses, fps := 0, 0
	for _, s := range samples {
		for _, p := range placements {
			in := p.place(s.text)
			out := r.RedactString(in)
			switch {
			case s.kind == "tp" && s.secret != "":
				if l := leak(markerRE.ReplaceAllString(out, ""), s.secret); l != "" {
					misses++
					t.Errorf("miss: %s placed %s: %q left in %q", s.rule, p.name, l, out)
				}
			case s.kind == "fp" && !s.secretShaped:
				if out != in {
					fps++
					t.Errorf("false positive: %s placed %s: %q -> %q", s.rule, p.name, in, out)
				}
			}
		}
	}
	// The judged samples for the corpus test of every sink
	// (cmd/autodiag): each tp with its secret, each fp that must come out
	// unchanged. -update writes it; otherwise it must be current.
	var b bytes.Buffer
	b.WriteString("# Generated by TestGitleaksCorpus -update from gitleaks_samples.tsv; DO NOT EDIT.\n" +
		"# Columns: tp (secret and sample) or fp (a sample that must come out unchanged), gitleaks rule id, JSON strings.\n")
	for _, s := range samples {
		switch {
		case s.kind == "tp" && s.secret != "":
			sec, _ := json.Marshal(s.secret)
			txt, _ := json.Marshal(s.text)
			fmt.Fprintf(&b, "tp\t%s\t%s\t%s\n", s.rule, sec, txt)
		case s.kind == "fp" && !s.secretShaped:
			txt, _ := json.Marshal(s.text)
			fmt.Fprintf(&b, "fp\t%s\t\"\"\t%s\n", s.rule, txt)
		}
	}
	const judgedFile = "testdata/gitleaks_judged.tsv"
	if *update {
		if err := os.WriteFile(judgedFile, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if cur, err := os.ReadFile(judgedFile); err != nil || !bytes.Equal(cur, b.Bytes()) {
		t.Errorf("%s is not current (%v): go test -run '^TestGitleaksCorpus$' -update ./agent/redact/", judgedFile, err)
	}
	t.Logf("gitleaks corpus: %d tps of %d rules, %d fps (%d secret-shaped fps not judged), %d placements; %d misses, %d false positives",
		tps, len(kinds), fpsN, shapedN, len(placements), misses, fps)
}
