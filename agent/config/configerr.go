package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/configerr"
)

// ConfigError is one problem of a configuration: the dotted key it is about
// ("limiter.rules[0].limits[1].window.per"), the line of the file it is on
// (0 when the value is not from the file: a default, or an AUTODIAG_*
// variable) and the problem itself. Leaf packages return the same type
// (configerr.Error) with keys relative to their section.
type ConfigError = configerr.Error

// lineNotInFile marks a problem whose value did not come from the file
// (an AUTODIAG_* variable), so withLines gives it no line.
const lineNotInFile = -1

// ErrUnknownKey is the problem of a key the configuration does not have.
var ErrUnknownKey = errors.New("unknown key")

// Problems lists the ConfigErrors inside err (a Load or Validate
// error), in the order they are reported.
func Problems(err error) []*ConfigError {
	var out []*ConfigError
	for _, e := range flatten(err) {
		var ce *ConfigError
		if errors.As(e, &ce) {
			out = append(out, ce)
		}
	}
	return out
}

// problems collects ConfigErrors; the zero value is ready to use.
type problems struct {
	list []error
}

func (p *problems) add(key string, err error) {
	p.list = append(p.list, &ConfigError{Key: key, Err: err})
}

func (p *problems) addf(key, format string, args ...any) {
	p.add(key, fmt.Errorf(format, args...))
}

// adopt takes a section's Validate error under section: a *ConfigError
// keeps its problem and gets the section prefixed to its key; any other
// error is a problem of the section as a whole.
func (p *problems) adopt(section string, err error) {
	for _, e := range flatten(err) {
		var ce *ConfigError
		if errors.As(e, &ce) {
			p.list = append(p.list, &ConfigError{Key: configerr.JoinKey(section, ce.Key), Line: ce.Line, Err: ce.Err})
			continue
		}
		p.add(section, e)
	}
}

// adoptNew is adopt for a second check of the same settings (the SQS
// source's bounds on the queue section): it drops problems about keys
// already reported.
func (p *problems) adoptNew(section string, err error) {
	var q problems
	q.adopt(section, err)
	seen := map[string]bool{}
	for _, ce := range Problems(errors.Join(p.list...)) {
		seen[ce.Key] = true
	}
	for _, ce := range Problems(errors.Join(q.list...)) {
		if !seen[ce.Key] {
			p.list = append(p.list, ce)
		}
	}
}

func (p *problems) err() error { return errors.Join(p.list...) }

// withLines gives each ConfigError without a line the line of its key in
// the file under root, and orders the problems by line (those not in the
// file first, in the order they were found).
func withLines(root *yaml.Node, err error) error {
	var other []error
	var list []*ConfigError
	for _, e := range flatten(err) {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			other = append(other, e)
			continue
		}
		switch {
		case ce.Line == lineNotInFile:
			ce.Line = 0
		case ce.Line == 0 && root != nil:
			ce.Line = lineOf(root, ce.Key)
		}
		list = append(list, ce)
	}
	slices.SortStableFunc(list, func(a, b *ConfigError) int { return cmp.Compare(a.Line, b.Line) })
	for _, ce := range list {
		other = append(other, ce)
	}
	return errors.Join(other...)
}

// flatten unnests errors.Join trees.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// pathSteps splits "limiter.rules[0].limits[1].window" into
// limiter, rules, [0], limits, [1], window.
func pathSteps(key string) []string {
	var steps []string
	for part := range strings.SplitSeq(key, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				steps = append(steps, part)
				break
			}
			if i > 0 {
				steps = append(steps, part[:i])
			}
			j := strings.IndexByte(part, ']')
			if j < i {
				break
			}
			steps = append(steps, part[i:j+1])
			part = part[j+1:]
		}
	}
	return steps
}

// lookup finds the node at key, nil if absent.
func lookup(root *yaml.Node, key string) *yaml.Node {
	n, _ := walk(root, key)
	return n
}

// lineOf is the line of key in the file: of the key itself for a mapping
// entry, of the item for a list element; for a key that is not in the file,
// the line of the deepest part of its path that is (the list item whose
// omitted timeout is too long, say).
func lineOf(root *yaml.Node, key string) int {
	_, line := walk(root, key)
	return line
}

func walk(root *yaml.Node, key string) (*yaml.Node, int) {
	n := docContent(root)
	if n == nil {
		return nil, 0
	}
	line := 0
	for _, step := range pathSteps(key) {
		n = resolve(n)
		var next *yaml.Node
		nextLine := 0
		if strings.HasPrefix(step, "[") {
			idx, err := strconv.Atoi(strings.Trim(step, "[]"))
			if err == nil && n.Kind == yaml.SequenceNode && idx >= 0 && idx < len(n.Content) {
				next = n.Content[idx]
				nextLine = next.Line
			}
		} else if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == step {
					next, nextLine = n.Content[i+1], n.Content[i].Line
					break
				}
			}
		}
		if next == nil {
			return nil, line
		}
		n, line = next, nextLine
	}
	return n, line
}

// docContent is the top node of a parsed document.
func docContent(root *yaml.Node) *yaml.Node {
	if root == nil || root.Kind == 0 {
		return nil
	}
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		return root.Content[0]
	}
	return root
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// yamlErrLine is how the yaml package words a syntax error's line.
var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError is the problem of a file the yaml package cannot parse, on
// the line where the parse fails. The package names the line where the
// enclosing block starts ("did not find expected key" for a key indented
// wrong three lines below a "limiter:" points at the "limiter:"); the
// line that breaks the file is the first whose addition makes its prefix
// fail with the same complaint.
func syntaxError(data []byte, err error) error {
	m := yamlErrLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &ConfigError{Key: "config", Err: err}
	}
	line, _ := strconv.Atoi(m[1])
	msg := m[2]
	lines := strings.SplitAfter(string(data), "\n")
	for n := line; n <= len(lines); n++ {
		var doc yaml.Node
		perr := yaml.Unmarshal([]byte(strings.Join(lines[:n], "")), &doc)
		if pm := yamlErrLine.FindStringSubmatch(fmt.Sprint(perr)); pm != nil && pm[2] == msg {
			if n != line {
				return &ConfigError{Key: "config", Line: n, Err: fmt.Errorf("%s (check the indentation against the block that starts at line %d)", msg, line)}
			}
			break
		}
	}
	return &ConfigError{Key: "config", Line: line, Err: errors.New(msg)}
}
