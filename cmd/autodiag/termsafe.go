package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// termSafe is a writer for task data shown on an operator's terminal: a
// diagnostic's output (or a param, an alert name) may hold escape
// sequences that set the window title, clear the screen or rewrite what
// was printed, or bidi controls that make a line read otherwise than its
// bytes (a right-to-left override turns "exe.txt" around). Every control
// character other than newline and tab (C0, DEL, and the C1 range
// U+0080–U+009F, which some terminals obey as escape sequences of their
// own) and every bidi control (hiddenRune) is written as a visible
// escape: \x1b, \x7f, \u009b, \u202e. Invalid UTF-8 bytes are written as
// \xNN too.
type termSafe struct {
	w io.Writer
}

// terminalOut is w made safe for task data unless raw is set.
func terminalOut(w io.Writer, raw bool) io.Writer {
	if raw {
		return w
	}
	return termSafe{w: w}
}

func (t termSafe) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\n' || c == '\t':
			out = append(out, c)
			i++
		case c < 0x20 || c == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, c)
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(p[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				out = fmt.Appendf(out, `\x%02x`, c)
			case hiddenRune(r):
				out = fmt.Appendf(out, `\u%04x`, r)
			default:
				out = append(out, p[i:i+n]...)
			}
			i += n
		}
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// hiddenRune reports whether r is a non-ASCII rune a terminal does not
// show as itself: a C1 control (U+0080–U+009F) or a bidi control
// (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069), which reorder
// the text around them.
func hiddenRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f, r == 0x061c, r == 0x200e, r == 0x200f,
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// jsonSafe is a writer for JSON that carries task data to a terminal (the
// --json forms): encoding/json escapes C0 controls but writes C1 and bidi
// controls as they are. jsonSafe writes each of them, and DEL, as a JSON
// \uXXXX escape, which decodes to the same string, so a script reading
// the JSON sees no difference and a person reading it sees the escape.
// It expects whole JSON texts per Write (json.Encoder's).
type jsonSafe struct {
	w io.Writer
}

// jsonOut is w made safe for JSON holding task data unless raw is set.
func jsonOut(w io.Writer, raw bool) io.Writer {
	if raw {
		return w
	}
	return jsonSafe{w: w}
}

func (j jsonSafe) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		c := p[i]
		if c == 0x7f {
			out = append(out, `\u007f`...)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if hiddenRune(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	if _, err := j.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
