package main

import (
	"fmt"
	"reflect"
	"strings"
)

// unsetEnv lists the configuration's `*_env` keys (a string field whose
// yaml key ends in _env) that name a variable lookup does not find or
// finds empty, as "key: VAR is unset". `run` refuses to start on any of
// them; `config validate` warns (and fails with --strict), so the two
// agree before a deploy rather than after.
func unsetEnv(cfg any, lookup func(string) (string, bool)) []string {
	var out []string
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem(), path)
			}
		case reflect.Struct:
			t := v.Type()
			for i := range t.NumField() {
				f := t.Field(i)
				if !f.IsExported() {
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				switch {
				case name == "-":
					continue
				case name == "" && f.Anonymous:
					walk(v.Field(i), path)
					continue
				case name == "":
					continue
				}
				key := name
				if path != "" {
					key = path + "." + name
				}
				fv := v.Field(i)
				if fv.Kind() == reflect.String && strings.HasSuffix(name, "_env") {
					if env := fv.String(); env != "" {
						if val, ok := lookup(env); !ok || val == "" {
							out = append(out, fmt.Sprintf("%s: %s is unset", key, env))
						}
					}
					continue
				}
				walk(fv, key)
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		case reflect.Map:
			iter := v.MapRange()
			for iter.Next() {
				walk(iter.Value(), fmt.Sprintf("%s.%v", path, iter.Key()))
			}
		}
	}
	walk(reflect.ValueOf(cfg), "")
	return out
}
