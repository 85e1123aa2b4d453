// Package configerr is the error of one configuration problem: the dotted
// key it is about, the line of the file it is on, and the problem. It is
// its own package so that the packages whose sections the configuration
// file holds (limiter, lifecycle, drain, runner, queue) can report a key as
// data, and the agent, which loads the file, can give it a line and a
// section prefix without reading keys back out of messages.
package configerr

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
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

// Error is the key, the line when known, and the problem, with every
// value the problem quotes cut to at most MaxQuoted bytes (Bound).
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", Bound(e.Key), e.Line, Bound(e.Err.Error()))
	}
	return fmt.Sprintf("%s: %s", Bound(e.Key), Bound(e.Err.Error()))
}

// MaxQuoted is the most bytes of one value a problem quotes; MaxMessage
// bounds a whole problem's text.
const (
	MaxQuoted  = 200
	MaxMessage = 2 << 10
)

// Bound shortens a problem's text for people: a quoted value ("…" as %q
// writes it, or `…`) or a run without spaces longer than MaxQuoted keeps
// its first bytes and says how long it was, and the whole text keeps its
// head and tail within MaxMessage. A configuration value can be any size
// (a 50 MB one was quoted whole); the problem needs only enough of it to
// be found.
func Bound(msg string) string {
	if len(msg) <= MaxQuoted {
		return msg
	}
	if len(msg) > 64*MaxMessage {
		// Cheap first: what follows scans the text.
		msg = utf8Head(msg, 32*MaxMessage) + " … " + utf8Tail(msg, 8*MaxMessage)
	}
	var b strings.Builder
	for i := 0; i < len(msg); {
		c := msg[i]
		if c == '"' || c == '`' {
			if q, err := strconv.QuotedPrefix(msg[i:]); err == nil {
				b.WriteString(cutRun(q, c))
				i += len(q)
				continue
			}
		}
		if c != ' ' && c != '\n' {
			j := i
			for j < len(msg) && msg[j] != ' ' && msg[j] != '\n' && msg[j] != '"' && msg[j] != '`' {
				j++
			}
			if j == i {
				j++
			}
			b.WriteString(cutRun(msg[i:j], 0))
			i = j
			continue
		}
		b.WriteByte(c)
		i++
	}
	out := b.String()
	if len(out) > MaxMessage {
		out = utf8Head(out, MaxMessage*3/4) + " … " + utf8Tail(out, MaxMessage/4)
	}
	return out
}

// cutRun is run (a quoted value when quote is its quote character) cut to
// MaxQuoted bytes with its length after it.
func cutRun(run string, quote byte) string {
	if len(run) <= MaxQuoted {
		return run
	}
	head := utf8Head(run, MaxQuoted-1)
	if quote == '"' {
		// Do not end inside an escape (\x1b, \u00e9).
		if k := strings.LastIndexByte(head, '\\'); k >= len(head)-10 {
			head = head[:k]
		}
	}
	tail := "…"
	if quote != 0 {
		tail += string(quote)
	}
	return head + tail + fmt.Sprintf(" (%d bytes)", len(run))
}

// utf8Head is the longest prefix of s within n bytes that does not split
// a rune; utf8Tail the longest such suffix.
func utf8Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
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
