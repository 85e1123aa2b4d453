package alert

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"text/template"
	"time"
)

func tmplTestData() *templateData {
	return &templateData{
		Source: "alertmanager", Name: "DiskFull", Host: "WEB-01.internal:9100", Severity: "Critical", EventID: "f1@t",
		Labels:      map[string]string{"instance": "web-01.internal:9100", "mountpoint": "/var", "empty": "", "odd-name": "x"},
		Annotations: map[string]string{"summary": "disk full"},
		Dimensions:  map[string]string{"InstanceId": "i-0abc"},
		StartsAt:    time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC),
	}
}

func TestTemplateExpand(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"", ""},
		{"plain", "plain"},
		{"{{ .Source }}/{{.Name}}/{{ .Host }}/{{ .Severity }}/{{ .EventID }}", "alertmanager/DiskFull/WEB-01.internal:9100/Critical/f1@t"},
		{"{{ .Labels.mountpoint }} {{ .Annotations.summary }} {{ .Dimensions.InstanceId }}", "/var disk full i-0abc"},
		{"[{{ .Labels.missing }}]", "[]"},
		{"{{ .StartsAt }}", "2026-11-30 13:00:00 +0000 UTC"},
		{`{{ .Labels.missing | default "/" }}`, "/"},
		{`{{ .Labels.empty | default "/" }}`, "/"},
		{`{{ .Labels.mountpoint | default "/" }}`, "/var"},
		{`{{ default "/" .Labels.missing }}`, "/"},
		{`{{ default "x" .StartsAt }}`, "2026-11-30 13:00:00 +0000 UTC"},
		{"{{ .Host | lower }}", "web-01.internal:9100"},
		{"{{ .Host | upper }}", "WEB-01.INTERNAL:9100"},
		{"{{ .Host | trimPort }}", "WEB-01.internal"},
		{"{{ trimPort .Host }}", "WEB-01.internal"},
		{`{{ .Labels.instance | trimPort | regexReplace "\\.internal$" "" }}`, "web-01"},
		{"{{ .Labels.instance | trimPort | regexReplace `\\.internal$` `` }}", "web-01"},
		{`{{ regexReplace "^(\\w+)-(\\d+).*" "${2}-${1}" .Labels.instance }}`, "01-web"},
		{`{{ index .Labels "odd-name" }}`, "x"},
		{`{{ index .Labels "nope" | default "d" }}`, "d"},
		{`{{ (lower .Host) | trimPort }}`, "web-01.internal"},
		{`{{ default (upper .Name) .Labels.missing }}`, "DISKFULL"},
		{`{{ "lit" }}{{ "}}" }}`, "lit}}"},
		{"a  {{- .Name -}}  \n b", "aDiskFullb"},
		{"a {{/* a comment */}} b", "a  b"},
		{"a {{- /* a comment */ -}} b", "ab"},
		{"{{\n.Name\n| lower\n}}", "diskfull"},
		{"{{ (.StartsAt) }}", "2026-11-30 13:00:00 +0000 UTC"},
		{"{ .Name }", "{ .Name }"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			p, err := parseTemplate(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.execute(&regexCache{m: map[string]*regexp.Regexp{}}, tmplTestData())
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
			// What the README promises: the same as text/template.
			if ref, err := refExecute(tc.text, tmplTestData()); err != nil || ref != got {
				t.Fatalf("text/template gives %q, %v; expander %q", ref, err, got)
			}
		})
	}
}

func TestTemplateParseErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"{{ .Labels.instance | trimPort", "unclosed action"},
		{"{{ nosuchfunc }}", `function "nosuchfunc" not defined (functions: default, lower, upper, trimPort, regexReplace, index)`},
		{"{{ .Labels.x ", "unclosed action"},
		{"{{ }}", "missing value for command"},
		{"{{ .Host | }}", "missing value for command"},
		{"{{ .host }}", "no field .host: the fields are .Source .Name"},
		{"{{ .Host.x }}", "no field .Host.x"},
		{"{{ .Labels.a.b }}", "no field .Labels.a.b"},
		{"{{ .Labels }}", ".Labels is a map: use .Labels.NAME"},
		{"{{ lower .Labels }}", "lower: .Labels is a map"},
		{"{{ lower .StartsAt }}", "lower: .StartsAt is a time"},
		{"{{ . }}", "the dot alone is not a value"},
		{"{{ .Host | .Name }}", `".Name" after | is not a function`},
		{"{{ .Host .Name }}", "only a function takes arguments"},
		{"{{ lower }}", "wrong number of args for lower: want 1 got 0"},
		{"{{ .Host | upper .Name }}", "wrong number of args for upper: want 1 got 2"},
		{`{{ default "x" }}`, "wrong number of args for default: want 2 got 1"},
		{`{{ .Host | regexReplace "a" }}`, "wrong number of args for regexReplace: want 3 got 2"},
		{`{{ .Host | trimPort | regexReplace "(" "" }}`, "regexReplace: error parsing regexp"},
		{`{{ index .Host "a" }}`, "index takes a map first"},
		{`{{ "a" | index .Labels }}`, "not from a pipe"},
		{"{{ if .Host }}x{{ end }}", `"if" is not supported in route templates`},
		{"{{ range .Labels }}{{ . }}{{ end }}", `"range" is not supported`},
		{"{{ $x := .Host }}", "variables are not supported"},
		{"{{ 3 }}", `unexpected "3": want a field`},
		{`{{ "unterminated }}`, "unterminated quoted string"},
		{`{{ "\q" }}`, "bad string"},
		{"{{ (lower .Host }}", "unclosed left paren"},
		{"{{ lower .Host) }}", "unexpected right paren"},
		{"{{ /* open", "unclosed comment"},
		{"{{ /* c */ .Host }}", "comment ends before closing delimiter"},
		{"{{ .Host! }}", `bad character '!' in field .Host`},
		{"{{ .Labels. }}", "bad field after .Labels"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			_, err := parseTemplate(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want it to say %q", err, tc.want)
			}
		})
	}
}

func TestTemplateRunErrors(t *testing.T) {
	c := &regexCache{m: map[string]*regexp.Regexp{}}
	d := tmplTestData()
	d.Labels["re"] = "("
	d.Labels["big"] = strings.Repeat("b", maxTemplateOutput)
	for _, tc := range []struct {
		text string
		want error
		msg  string
	}{
		{`{{ regexReplace .Labels.re "" .Host }}`, nil, "regexReplace: error parsing regexp"},
		{"x{{ .Labels.big }}", errTemplateTooLong, ""},
		{`{{ .Labels.big | regexReplace "b" "bb" | lower }}`, errTemplateTooLong, ""},
	} {
		t.Run(tc.text, func(t *testing.T) {
			p, err := parseTemplate(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.execute(c, d)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err %v; want %v %q", err, tc.want, tc.msg)
			}
		})
	}
	// Exactly at the bound is fine.
	p, _ := parseTemplate("{{ .Labels.big }}")
	if got, err := p.execute(c, d); err != nil || len(got) != maxTemplateOutput {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
}

// refExecute runs text under text/template the way route templates ran
// before the expander, as the reference the expander must match.
func refExecute(text string, d *templateData) (string, error) {
	c := &regexCache{m: map[string]*regexp.Regexp{}}
	t, err := template.New("ref").Option("missingkey=zero").Funcs(template.FuncMap{
		"default": func(def string, v any) string {
			if v == nil {
				return def
			}
			if s, ok := v.(string); ok {
				return tmplDefault(def, s)
			}
			if tm, ok := v.(time.Time); ok {
				return tm.String()
			}
			return def
		},
		"lower": strings.ToLower, "upper": strings.ToUpper, "trimPort": trimPort, "regexReplace": c.replace,
	}).Parse(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = t.Execute(&b, d)
	return b.String(), err
}

// tmplPieces generate templates over the documented syntax.
var (
	tmplOperands = []string{".Source", ".Name", ".Host", ".Severity", ".EventID", ".Labels.instance", ".Labels.missing",
		".Labels.empty", ".Annotations.summary", ".Dimensions.InstanceId", `"lit"`, `""`, "`raw`", `"a:1"`}
	tmplStages = []string{"lower", "upper", "trimPort", `default "d"`, `regexReplace "[0-9]+" "N"`,
		`regexReplace "^(web)-" "${1}_"`, `regexReplace "\\." "_"`}
	tmplTexts = []string{"", " ", "x-", "\n", "{ ", "}"}
)

func genTemplate(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(3) {
		b.WriteString(tmplTexts[r.IntN(len(tmplTexts))])
		b.WriteString("{{")
		if r.IntN(4) == 0 {
			b.WriteString("- ")
		} else {
			b.WriteString(" ")
		}
		if r.IntN(3) == 0 {
			// A call with its last argument given.
			st := tmplStages[r.IntN(len(tmplStages))]
			b.WriteString(st + " " + genOperand(r))
		} else {
			b.WriteString(genOperand(r))
		}
		for range r.IntN(3) {
			b.WriteString(" | " + tmplStages[r.IntN(len(tmplStages))])
		}
		if r.IntN(4) == 0 {
			b.WriteString(" -}}")
		} else {
			b.WriteString(" }}")
		}
		b.WriteString(tmplTexts[r.IntN(len(tmplTexts))])
	}
	return b.String()
}

func genOperand(r *rand.Rand) string {
	if r.IntN(5) == 0 {
		return "(" + tmplStages[r.IntN(len(tmplStages))] + " " + tmplOperands[r.IntN(len(tmplOperands))] + ")"
	}
	return tmplOperands[r.IntN(len(tmplOperands))]
}

// TestTemplateMatchesTextTemplate: generated templates over the documented
// syntax give the same output under the expander and text/template.
func TestTemplateMatchesTextTemplate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		text := genTemplate(r)
		compareWithTextTemplate(t, text, true)
	}
}

// FuzzTemplateMatchesTextTemplate: whatever the expander accepts,
// text/template accepts and runs to the same output.
func FuzzTemplateMatchesTextTemplate(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		f.Add(genTemplate(r))
	}
	f.Add(`{{ index .Labels "odd-name" | upper }}`)
	f.Add("a {{- /* c */ -}} b")
	f.Fuzz(func(t *testing.T, text string) {
		compareWithTextTemplate(t, text, false)
	})
}

func compareWithTextTemplate(t *testing.T, text string, mustParse bool) {
	t.Helper()
	p, err := parseTemplate(text)
	if err != nil {
		if mustParse {
			t.Fatalf("%q: %v", text, err)
		}
		return
	}
	got, err := p.execute(&regexCache{m: map[string]*regexp.Regexp{}}, tmplTestData())
	if errors.Is(err, errTemplateTooLong) {
		return // the expander also bounds values inside a pipeline
	}
	ref, refErr := refExecute(text, tmplTestData())
	if (err != nil) != (refErr != nil) || got != ref {
		t.Fatalf("%q: expander %q, %v; text/template %q, %v", text, got, err, ref, refErr)
	}
}
