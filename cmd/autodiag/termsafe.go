package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// termSafe is a writer for task data shown on an operator's terminal: a
// diagnostic's output (or a param, an alert name) may hold escape
// sequences that set the window title, clear the screen or rewrite what
// was printed. Every control character other than newline and tab (C0,
// DEL, and the C1 range U+0080–U+009F, which some terminals obey as
// escape sequences of their own) is written as a visible escape: \x1b,
// \x7f, \u009b. Invalid UTF-8 bytes are written as \xNN too.
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
			case r >= 0x80 && r <= 0x9f:
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
