// Package configerr is the error of one configuration problem: the dotted
// key it is about, the line of the file it is on, and the problem. It is
// its own package so that the packages whose sections the configuration
// file holds (limiter, lifecycle, drain, runner, queue) can report a key as
// data, and the agent, which loads the file, can give it a line and a
// section prefix without reading keys back out of messages.
package configerr

import (
	"fmt"
	"strings"
)

// Error is one configuration problem. Key is relative to whoever returns
// it: a section's Validate names keys inside the section ("rules[0].name"),
// the loader prefixes the section. Line is 0 when unknown (a default, or a
// value from the environment).
type Error struct {
	Key  string
	Line int
	Err  error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %v", e.Key, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf is the problem fmt.Errorf(format, args...) at key.
func Errorf(key, format string, args ...any) *Error {
	return &Error{Key: key, Err: fmt.Errorf(format, args...)}
}

// JoinKey puts key under section, either of which may be empty:
// "a" + "b" = "a.b", "a" + "[0].b" = "a[0].b".
func JoinKey(section, key string) string {
	switch {
	case section == "":
		return key
	case key == "":
		return section
	case strings.HasPrefix(key, "["):
		return section + key
	}
	return section + "." + key
}
