package task

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxQuoted is the most bytes QuoteID writes, quotes and cut mark
// included.
const MaxQuoted = 200

// QuoteID is id as a log line, an audit entry or an error shows it: as it
// is when it is a valid task id (or none), else quoted ("bad id/../x") with every
// character outside printable ASCII escaped and cut to at most MaxQuoted
// bytes, its full length given after the cut. A caller-chosen id can then
// neither forge a terminal escape nor grow a line to its own size, and
// the quotes say it is no id GET /v1/tasks knows.
func QuoteID(id string) string {
	if id == "" || idPattern.MatchString(id) {
		return id
	}
	return QuoteCut(id, MaxQuoted)
}

// QuoteText is a caller-chosen field of a task that may have failed
// validation (its host, its diagnostic) as QuoteID shows an id: as it is
// when it is at most MaxQuoted bytes of printable ASCII without a quote,
// else quoted, escaped and cut.
func QuoteText(s string) string {
	if len(s) <= MaxQuoted && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' }) {
		return s
	}
	return QuoteCut(s, MaxQuoted)
}

// QuoteCut is s quoted, escaped to printable ASCII and cut to at most max
// bytes (at least 40), with `…" (N bytes)` after a cut.
func QuoteCut(s string, limit int) string {
	limit = max(limit, 40)
	var b strings.Builder
	b.WriteByte('"')
	tail := fmt.Sprintf(`…" (%d bytes)`, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		var esc string
		if r == utf8.RuneError && n == 1 {
			esc = fmt.Sprintf(`\x%02x`, s[i])
		} else {
			q := strconv.QuoteToASCII(string(r))
			esc = q[1 : len(q)-1]
		}
		// Room for the closing quote, or for the cut mark if more follows.
		room := limit - len(tail)
		if i+n == len(s) {
			room = limit - 1
		}
		if b.Len()+len(esc) > room {
			b.WriteString(tail)
			return b.String()
		}
		b.WriteString(esc)
		i += n
	}
	b.WriteByte('"')
	return b.String()
}
