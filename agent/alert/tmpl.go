package alert

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Route templates are the part of Go's text/template syntax the README
// documents: text with {{ }} actions, each a pipeline of fields
// (.Host, .Labels.instance), string literals, parentheses and the
// functions below, with {{- -}} trimming and {{/* comments */}}. A
// template that parses here executes the same way under text/template
// (FuzzTemplateMatchesTextTemplate checks it). text/template itself is
// not used: its field evaluation reaches reflect.Value.MethodByName,
// which stops the linker from dropping any exported method of any type
// kept in an interface and so triples the binary.
//
// Unlike text/template, everything that can be checked before an alert
// arrives is a parse error (a config error naming its key): an unknown
// field or function, a wrong number of arguments, a map where a string is
// needed, a regexReplace pattern that does not compile.

// tmpl is a parsed route template.
type tmpl struct {
	parts []tmplPart
}

// tmplPart is literal text or, when pipe is set, an action.
type tmplPart struct {
	text string
	pipe []tmplCmd
}

// tmplCmd is one stage of a pipeline: a function with its arguments (the
// previous stage's value is appended), or, for the first stage only, a
// lone operand.
type tmplCmd struct {
	fn   *tmplFunc
	args []tmplArg
}

// tmplArg is an operand: a literal, a field, or a parenthesised pipeline.
type tmplArg struct {
	lit   string
	isLit bool
	field []string // ["Labels", "instance"], ["Host"]
	pipe  []tmplCmd
	re    *regexp.Regexp // a regexReplace pattern given as a literal, compiled at parse
}

// Value kinds a field can have: a map is only usable with a key.
type tmplKind int

const (
	kindString tmplKind = iota
	kindMap
	kindTime
)

// tmplFields are the fields of templateData, by kind.
var tmplFields = map[string]tmplKind{
	"Source": kindString, "Name": kindString, "Host": kindString, "Severity": kindString, "EventID": kindString,
	"Labels": kindMap, "Annotations": kindMap, "Dimensions": kindMap, "StartsAt": kindTime,
}

const tmplFieldList = ".Source .Name .Host .Severity .EventID .Labels.NAME .Annotations.NAME .Dimensions.NAME .StartsAt"

// tmplFunc is one function route templates may call. All take strings,
// but default's last argument may be any value and index's first is a map.
type tmplFunc struct {
	name  string
	arity int
	call  func(c *regexCache, args []tmplValue) (string, error)
}

// tmplValue is an evaluated operand.
type tmplValue struct {
	s    string
	kind tmplKind
	m    map[string]string
	t    time.Time
}

func (v tmplValue) String() string {
	if v.kind == kindTime {
		return v.t.String()
	}
	return v.s
}

var tmplFuncs = map[string]*tmplFunc{
	"default": {name: "default", arity: 2, call: func(_ *regexCache, a []tmplValue) (string, error) {
		return tmplDefault(a[0].s, a[1].String()), nil
	}},
	"lower":    {name: "lower", arity: 1, call: func(_ *regexCache, a []tmplValue) (string, error) { return strings.ToLower(a[0].s), nil }},
	"upper":    {name: "upper", arity: 1, call: func(_ *regexCache, a []tmplValue) (string, error) { return strings.ToUpper(a[0].s), nil }},
	"trimPort": {name: "trimPort", arity: 1, call: func(_ *regexCache, a []tmplValue) (string, error) { return trimPort(a[0].s), nil }},
	"regexReplace": {name: "regexReplace", arity: 3, call: func(c *regexCache, a []tmplValue) (string, error) {
		return c.replace(a[0].s, a[1].s, a[2].s)
	}},
	"index": {name: "index", arity: 2, call: func(_ *regexCache, a []tmplValue) (string, error) { return a[0].m[a[1].s], nil }},
}

const tmplFuncList = "default, lower, upper, trimPort, regexReplace, index"

// tmplKeywords are text/template actions route templates do not have.
var tmplKeywords = map[string]bool{
	"if": true, "else": true, "end": true, "range": true, "with": true, "template": true, "define": true,
	"block": true, "break": true, "continue": true, "nil": true, "true": true, "false": true,
}

// parseTemplate parses text; the error says where (byte offset) and what.
func parseTemplate(text string) (*tmpl, error) {
	t := &tmpl{}
	rest := text
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			t.addText(rest)
			return t, nil
		}
		lit := rest[:i]
		act := rest[i+2:]
		if len(act) >= 2 && act[0] == '-' && isTmplSpace(act[1]) {
			lit = strings.TrimRight(lit, " \t\r\n")
			act = act[1:]
		}
		t.addText(lit)
		off := len(text) - len(act)
		p := &tmplParser{src: text, pos: off}
		pipe, trimRight, err := p.action()
		if err != nil {
			return nil, err
		}
		if pipe != nil {
			t.parts = append(t.parts, tmplPart{pipe: pipe})
		}
		rest = text[p.pos:]
		if trimRight {
			rest = strings.TrimLeft(rest, " \t\r\n")
		}
	}
}

func (t *tmpl) addText(s string) {
	if s != "" {
		t.parts = append(t.parts, tmplPart{text: s})
	}
}

func isTmplSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// tmplParser reads one action of src from pos, up to and past its "}}".
type tmplParser struct {
	src string
	pos int
}

func (p *tmplParser) errorf(format string, a ...any) error {
	return fmt.Errorf("at byte %d: "+format, append([]any{p.pos}, a...)...)
}

// skipSpace skips blanks and reports whether the action ends there
// ("}}" or " -}}"), consuming the delimiter if so.
func (p *tmplParser) skipSpace() (end, trimRight bool) {
	start := p.pos
	for p.pos < len(p.src) && isTmplSpace(p.src[p.pos]) {
		p.pos++
	}
	if p.pos > start && strings.HasPrefix(p.src[p.pos:], "-}}") {
		p.pos += 3
		return true, true
	}
	if strings.HasPrefix(p.src[p.pos:], "}}") {
		p.pos += 2
		return true, false
	}
	return false, false
}

// action parses from after "{{" to past "}}": nil pipe for a comment.
func (p *tmplParser) action() (pipe []tmplCmd, trimRight bool, err error) {
	if end, _ := p.skipSpace(); end {
		return nil, false, p.errorf("missing value for command")
	}
	if strings.HasPrefix(p.src[p.pos:], "/*") {
		j := strings.Index(p.src[p.pos+2:], "*/")
		if j < 0 {
			return nil, false, p.errorf("unclosed comment")
		}
		p.pos += 2 + j + 2
		end, tr := p.skipSpace()
		if !end {
			return nil, false, p.errorf("comment ends before closing delimiter")
		}
		return nil, tr, nil
	}
	pipe, err = p.pipeline(false)
	if err != nil {
		return nil, false, err
	}
	end, tr := p.skipSpace()
	if !end {
		return nil, false, p.errorf("unexpected %q in action", p.peekToken())
	}
	return pipe, tr, nil
}

func (p *tmplParser) peekToken() string {
	s := p.src[p.pos:]
	if s == "" {
		return "end of template"
	}
	n := strings.IndexAny(s, " \t\r\n}")
	if n <= 0 {
		n = min(len(s), 1)
	}
	return s[:n]
}

// pipeline parses commands separated by "|" up to "}}" or, inParen, ")".
func (p *tmplParser) pipeline(inParen bool) ([]tmplCmd, error) {
	var pipe []tmplCmd
	for {
		cmd, err := p.command(len(pipe) > 0)
		if err != nil {
			return nil, err
		}
		pipe = append(pipe, cmd)
		save := p.pos
		if end, _ := p.skipSpace(); end {
			p.pos = save
			if inParen {
				return nil, p.errorf("unclosed left paren")
			}
			return pipe, nil
		}
		switch {
		case p.pos >= len(p.src):
			return nil, p.errorf("unclosed action")
		case p.src[p.pos] == '|':
			p.pos++
		case p.src[p.pos] == ')':
			if !inParen {
				return nil, p.errorf("unexpected right paren")
			}
			p.pos++
			return pipe, nil
		default:
			return nil, p.errorf("unexpected %q in action", p.peekToken())
		}
	}
}

// command parses a function call or an operand; piped means a value
// arrives from the previous stage as the last argument.
func (p *tmplParser) command(piped bool) (tmplCmd, error) {
	if end, _ := p.skipSpace(); end || p.pos >= len(p.src) {
		return tmplCmd{}, p.errorf("missing value for command")
	}
	start := p.pos
	if name := p.ident(); name != "" {
		f, ok := tmplFuncs[name]
		if !ok {
			p.pos = start
			if tmplKeywords[name] {
				return tmplCmd{}, p.errorf("%q is not supported in route templates: only fields, strings and the functions %s", name, tmplFuncList)
			}
			return tmplCmd{}, p.errorf("function %q not defined (functions: %s)", name, tmplFuncList)
		}
		cmd := tmplCmd{fn: f}
		for {
			save := p.pos
			end, _ := p.skipSpace()
			p.pos = save
			if end || p.pos >= len(p.src) {
				break
			}
			if c := p.src[p.pos]; !isTmplSpace(c) {
				if c == '|' || c == ')' {
					break
				}
				return tmplCmd{}, p.errorf("unexpected %q after %s", p.peekToken(), name)
			}
			for p.pos < len(p.src) && isTmplSpace(p.src[p.pos]) {
				p.pos++
			}
			if c := p.src[p.pos:]; c == "" || c[0] == '|' || c[0] == ')' || strings.HasPrefix(c, "}}") || strings.HasPrefix(c, "-}}") {
				continue
			}
			a, err := p.operand()
			if err != nil {
				return tmplCmd{}, err
			}
			cmd.args = append(cmd.args, a)
		}
		return cmd, p.checkCall(cmd, piped, start)
	}
	if piped {
		return tmplCmd{}, p.errorf("%q after | is not a function (functions: %s)", p.peekToken(), tmplFuncList)
	}
	a, err := p.operand()
	if err != nil {
		return tmplCmd{}, err
	}
	cmd := tmplCmd{args: []tmplArg{a}}
	save := p.pos
	if end, _ := p.skipSpace(); !end && p.pos < len(p.src) && p.src[p.pos] != '|' && p.src[p.pos] != ')' {
		return tmplCmd{}, p.errorf("unexpected %q: only a function takes arguments", p.peekToken())
	}
	p.pos = save
	if a.kind() == kindMap {
		return tmplCmd{}, p.errorf(".%s is a map: use .%s.NAME or index .%s \"NAME\"", a.field[0], a.field[0], a.field[0])
	}
	return cmd, nil
}

// checkCall checks a call's arity and argument kinds; regexReplace's
// literal pattern is compiled here.
func (p *tmplParser) checkCall(cmd tmplCmd, piped bool, at int) error {
	n := len(cmd.args)
	if piped {
		n++
	}
	if n != cmd.fn.arity {
		p.pos = at
		return p.errorf("wrong number of args for %s: want %d got %d", cmd.fn.name, cmd.fn.arity, n)
	}
	for i, a := range cmd.args {
		k := a.kind()
		switch {
		case cmd.fn.name == "index" && i == 0:
			if k != kindMap {
				p.pos = at
				return p.errorf("index takes a map first: .Labels, .Annotations or .Dimensions")
			}
		case k == kindMap:
			p.pos = at
			return p.errorf("%s: .%s is a map: use .%s.NAME", cmd.fn.name, a.field[0], a.field[0])
		case k == kindTime && (cmd.fn.name != "default" || i != 1):
			p.pos = at
			return p.errorf("%s: .StartsAt is a time, not a string", cmd.fn.name)
		}
	}
	if cmd.fn.name == "index" && piped {
		p.pos = at
		return p.errorf("index takes its map and key as arguments, not from a pipe")
	}
	if cmd.fn.name == "regexReplace" && len(cmd.args) > 0 && cmd.args[0].isLit {
		re, err := regexp.Compile(cmd.args[0].lit)
		if err != nil {
			p.pos = at
			return p.errorf("regexReplace: %w", err)
		}
		cmd.args[0].re = re
	}
	return nil
}

func (a tmplArg) kind() tmplKind {
	if len(a.field) == 1 {
		return tmplFields[a.field[0]]
	}
	return kindString
}

func (p *tmplParser) ident() string {
	i := p.pos
	for i < len(p.src) {
		r, n := utf8.DecodeRuneInString(p.src[i:])
		if r != '_' && !unicode.IsLetter(r) && (i == p.pos || !unicode.IsDigit(r)) {
			break
		}
		i += n
	}
	s := p.src[p.pos:i]
	p.pos = i
	return s
}

// operand parses a field, a string literal or a parenthesised pipeline.
func (p *tmplParser) operand() (tmplArg, error) {
	if p.pos >= len(p.src) {
		return tmplArg{}, p.errorf("unclosed action")
	}
	switch p.src[p.pos] {
	case '.':
		return p.field()
	case '"', '`':
		return p.str()
	case '(':
		p.pos++
		pipe, err := p.pipeline(true)
		if err != nil {
			return tmplArg{}, err
		}
		if len(pipe) == 1 && pipe[0].fn == nil && pipe[0].args[0].kind() != kindString {
			// (.StartsAt) stays a time; a parenthesised lone operand is it.
			return pipe[0].args[0], nil
		}
		return tmplArg{pipe: pipe}, nil
	case '$':
		return tmplArg{}, p.errorf("variables are not supported in route templates")
	}
	return tmplArg{}, p.errorf("unexpected %q: want a field (%s), a \"string\" or a function (%s)", p.peekToken(), tmplFieldList, tmplFuncList)
}

func (p *tmplParser) field() (tmplArg, error) {
	var path []string
	for p.pos < len(p.src) && p.src[p.pos] == '.' {
		p.pos++
		name := p.ident()
		if name == "" {
			if len(path) == 0 {
				return tmplArg{}, p.errorf("the dot alone is not a value: use a field (%s)", tmplFieldList)
			}
			return tmplArg{}, p.errorf("bad field after .%s", strings.Join(path, "."))
		}
		path = append(path, name)
	}
	if p.pos < len(p.src) {
		if c := p.src[p.pos]; !isTmplSpace(c) && c != '|' && c != ')' && !strings.HasPrefix(p.src[p.pos:], "}}") {
			return tmplArg{}, p.errorf("bad character %q in field .%s", c, strings.Join(path, "."))
		}
	}
	k, ok := tmplFields[path[0]]
	switch {
	case !ok:
		return tmplArg{}, p.errorf("no field .%s: the fields are %s", path[0], tmplFieldList)
	case k == kindMap && len(path) > 2, k != kindMap && len(path) > 1:
		return tmplArg{}, p.errorf("no field .%s", strings.Join(path, "."))
	}
	return tmplArg{field: path}, nil
}

func (p *tmplParser) str() (tmplArg, error) {
	q := p.src[p.pos]
	i := p.pos + 1
	for i < len(p.src) && p.src[i] != q {
		if q == '"' && p.src[i] == '\\' {
			i++
		} else if q == '"' && p.src[i] == '\n' {
			break
		}
		i++
	}
	if i >= len(p.src) || p.src[i] != q {
		return tmplArg{}, p.errorf("unterminated quoted string")
	}
	s, err := strconv.Unquote(p.src[p.pos : i+1])
	if err != nil {
		return tmplArg{}, p.errorf("bad string %s: %w", p.src[p.pos:i+1], err)
	}
	p.pos = i + 1
	return tmplArg{lit: s, isLit: true}, nil
}

// errTemplateTooLong is the error of a template whose output passes
// maxTemplateOutput.
var errTemplateTooLong = fmt.Errorf("output longer than %d bytes", maxTemplateOutput)

// execute runs t on data; the output is bounded by maxTemplateOutput.
func (t *tmpl) execute(c *regexCache, data *templateData) (string, error) {
	var b strings.Builder
	for _, pt := range t.parts {
		s := pt.text
		if pt.pipe != nil {
			v, err := runPipe(c, pt.pipe, data)
			if err != nil {
				return "", err
			}
			s = v.String()
		}
		if b.Len()+len(s) > maxTemplateOutput {
			return "", errTemplateTooLong
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

func runPipe(c *regexCache, pipe []tmplCmd, data *templateData) (tmplValue, error) {
	var prev tmplValue
	for i, cmd := range pipe {
		args := make([]tmplValue, 0, len(cmd.args)+1)
		for _, a := range cmd.args {
			v, err := a.eval(c, data)
			if err != nil {
				return tmplValue{}, err
			}
			args = append(args, v)
		}
		if cmd.fn == nil {
			prev = args[0]
			continue
		}
		if i > 0 {
			args = append(args, prev)
		}
		if cmd.fn.name == "regexReplace" && cmd.args[0].re != nil {
			prev = tmplValue{s: cmd.args[0].re.ReplaceAllString(args[2].s, args[1].s)}
			continue
		}
		s, err := cmd.fn.call(c, args)
		if err != nil {
			return tmplValue{}, fmt.Errorf("%s: %w", cmd.fn.name, err)
		}
		if len(s) > maxTemplateOutput {
			return tmplValue{}, errTemplateTooLong
		}
		prev = tmplValue{s: s}
	}
	return prev, nil
}

func (a tmplArg) eval(c *regexCache, d *templateData) (tmplValue, error) {
	switch {
	case a.isLit:
		return tmplValue{s: a.lit}, nil
	case a.pipe != nil:
		return runPipe(c, a.pipe, d)
	}
	var m map[string]string
	switch a.field[0] {
	case "Source":
		return tmplValue{s: d.Source}, nil
	case "Name":
		return tmplValue{s: d.Name}, nil
	case "Host":
		return tmplValue{s: d.Host}, nil
	case "Severity":
		return tmplValue{s: d.Severity}, nil
	case "EventID":
		return tmplValue{s: d.EventID}, nil
	case "StartsAt":
		return tmplValue{kind: kindTime, t: d.StartsAt}, nil
	case "Labels":
		m = d.Labels
	case "Annotations":
		m = d.Annotations
	case "Dimensions":
		m = d.Dimensions
	default:
		return tmplValue{}, errors.New("no field ." + a.field[0]) // parseTemplate admits none
	}
	if len(a.field) == 2 {
		return tmplValue{s: m[a.field[1]]}, nil
	}
	return tmplValue{kind: kindMap, m: m}, nil
}
