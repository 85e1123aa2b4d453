package config

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
	"go.yaml.in/yaml/v3"
)

// The configuration's schema is its Go types: a key exists when a field has
// a yaml tag naming it. decodeYAML walks a parsed file and those types side
// by side, so every unknown key, duplicate key and unreadable value is
// found in one pass, each with its dotted key and line, and the values that
// are readable are decoded even when others are not.

// decodeYAML decodes the document under root over *out (the defaults).
// A mapping updates the fields it names; a list or a map replaces the
// default wholesale.
func decodeYAML(root *yaml.Node, out any) error {
	if emptyDocument(root) {
		return nil // the defaults
	}
	n := docContent(root)
	var p problems
	d := decoder{p: &p}
	if resolve(n).Kind != yaml.MappingNode {
		p.list = append(p.list, &ConfigError{Key: "config", Line: n.Line, Err: errors.New("the file must be a YAML mapping of keys")})
		return p.err()
	}
	d.value(n, reflect.ValueOf(out).Elem(), "")
	return p.err()
}

type decoder struct {
	p *problems
}

func (d decoder) fail(key string, n *yaml.Node, err error) {
	if key == "" {
		key = "config"
	}
	d.p.list = append(d.p.list, &ConfigError{Key: key, Line: n.Line, Err: err})
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	yamlUnmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// isLeaf reports whether t is read from a single YAML value by the yaml
// package itself.
func isLeaf(t reflect.Type) bool {
	if t == durationType || reflect.PointerTo(t).Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(yamlUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Slice, reflect.Array, reflect.Map, reflect.Pointer:
		return false
	}
	return true
}

func (d decoder) value(n *yaml.Node, v reflect.Value, key string) {
	n = resolve(n)
	if isNull(n) {
		// As in the yaml package: "key:" empties a list, map or pointer
		// and leaves any other value at its default.
		switch v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
			v.SetZero()
		}
		return
	}
	t := v.Type()
	if isLeaf(t) {
		d.leaf(n, v, key)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.value(n, p.Elem(), key)
		v.Set(p)
	case reflect.Struct:
		d.structure(n, v, key)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(key, n, fmt.Errorf("want a list, not %s", describe(n)))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, s.Index(i), fmt.Sprintf("%s[%d]", key, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(key, n, fmt.Errorf("want a mapping, not %s", describe(n)))
			return
		}
		m := reflect.MakeMapWithSize(t, len(n.Content)/2)
		d.entries(n, key, func(k, val *yaml.Node, p string) {
			kv := reflect.New(t.Key()).Elem()
			d.leaf(k, kv, p)
			ev := reflect.New(t.Elem()).Elem()
			d.value(val, ev, p)
			m.SetMapIndex(kv, ev)
		})
		v.Set(m)
	default:
		d.fail(key, n, fmt.Errorf("cannot hold a %s", t))
	}
}

func (d decoder) structure(n *yaml.Node, v reflect.Value, key string) {
	if n.Kind != yaml.MappingNode {
		d.fail(key, n, fmt.Errorf("want a mapping, not %s", describe(n)))
		return
	}
	fields := yamlFields(v.Type())
	d.entries(n, key, func(k, val *yaml.Node, p string) {
		idx, ok := fields[k.Value]
		if !ok {
			d.fail(p, k, unknownKey(k.Value, fields))
			return
		}
		d.value(val, v.FieldByIndex(idx), p)
	})
}

// entries calls f for each key of the mapping n, merged mappings ("<<")
// first so the keys written out override them, and reports each key that
// appears twice.
func (d decoder) entries(n *yaml.Node, key string, f func(k, val *yaml.Node, p string)) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged := []*yaml.Node{val}
			if val.Kind == yaml.SequenceNode {
				merged = val.Content
			}
			for _, m := range merged {
				if m = resolve(m); m.Kind != yaml.MappingNode {
					d.fail(configerr.JoinKey(key, "<<"), k, fmt.Errorf("merges a mapping, not %s", describe(m)))
					continue
				}
				d.entries(m, key, f)
			}
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(key, k, fmt.Errorf("a key must be a single value, not %s", describe(k)))
			continue
		}
		p := configerr.JoinKey(key, k.Value)
		if line, dup := first[k.Value]; dup {
			d.fail(p, k, fmt.Errorf("duplicate key (first at line %d)", line))
			continue
		}
		first[k.Value] = k.Line
		f(k, val, p)
	}
}

// leaf decodes the single value n into v; v keeps its value when n cannot
// be read.
func (d decoder) leaf(n *yaml.Node, v reflect.Value, key string) {
	// A type with its own UnmarshalYAML may read a mapping or a list too
	// (limiter.Concurrency: a number or {max_percent, per}).
	if n.Kind != yaml.ScalarNode && !reflect.PointerTo(v.Type()).Implements(yamlUnmarshalerType) {
		d.fail(key, n, fmt.Errorf("want %s, not %s", want(v.Type()), describe(n)))
		return
	}
	p := reflect.New(v.Type())
	if err := n.Decode(p.Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			err = fmt.Errorf("%q is not %s", n.Value, want(v.Type()))
		}
		d.fail(key, n, err)
		return
	}
	// YAML reads .nan and .inf as numbers, and no comparison refuses NaN:
	// a range check passes it and every use of it fails at run time.
	if k := v.Kind(); k == reflect.Float32 || k == reflect.Float64 {
		if f := p.Elem().Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(key, n, fmt.Errorf("must be a finite number, not %q", n.Value))
			return
		}
	}
	v.Set(p.Elem())
}

// want names what a value of t looks like in YAML.
func want(t reflect.Type) string {
	if t == durationType {
		return "a duration (e.g. 200ms, 30s, 10m)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a " + t.String()
}

// describe names the kind of node n for a message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an empty value"
}

// yamlFields maps each yaml key of struct type t to its field: the name in
// the field's yaml tag; an ",inline" struct contributes its own keys; a
// field without a tag is not a configuration key.
func yamlFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("yaml")
		if !ok || tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if inline := strings.Contains(","+opts+",", ",inline,"); inline && f.Type.Kind() == reflect.Struct {
			for k, idx := range yamlFields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = []int{i}
	}
	return out
}

// unknownKey is ErrUnknownKey with the nearest key of the same mapping,
// when one is near enough to be the key meant ("wokers": did you mean
// "workers"?), or the keys there are when there are few.
func unknownKey(key string, fields map[string][]int) error {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	if best, ok := nearest(key, names); ok {
		return fmt.Errorf("%w; did you mean %q?", ErrUnknownKey, best)
	}
	if len(fields) > 0 && len(fields) <= 8 {
		slices.Sort(names)
		return fmt.Errorf("%w; the keys here are %s", ErrUnknownKey, strings.Join(names, ", "))
	}
	return ErrUnknownKey
}

// nearest is the name of names closest to name, when it is near enough to
// be the one meant: within a third of name's length, at least 1, at most
// 3 edits (a typo or two, not a different word). Ties go to the first in
// sort order, so the suggestion is stable.
func nearest(name string, names []string) (string, bool) {
	best, bestD := "", -1
	for _, n := range names {
		d := editDistance(strings.ToLower(name), n)
		if bestD < 0 || d < bestD || d == bestD && n < best {
			best, bestD = n, d
		}
	}
	return best, bestD >= 0 && bestD <= min(3, max(1, len(name)/3))
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (config keys are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
