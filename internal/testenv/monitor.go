package testenv

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Commands returns the commands a Redis server at addr ran while fn ran
// that name a key containing mark (lower-case command names; "lua:" before
// those a script ran), read from MONITOR, so that a test can assert what a
// script costs on a server other tests share. end is called once fn
// returned; it must send a command whose line contains endMark.
func Commands(ctx context.Context, t testing.TB, addr, mark, endMark string, fn func(), end func()) []string {
	t.Helper()
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("monitor %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "MONITOR\r\n"); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("monitor: %q %v", line, err)
	}
	fn()
	end()
	var out []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("monitor: no line with %q: %v", endMark, err)
		}
		if strings.Contains(line, endMark) {
			return out
		}
		if !strings.Contains(line, mark) {
			continue
		}
		open, shut := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
		rest := line[shut+1:]
		q1 := strings.IndexByte(rest, '"')
		q2 := strings.IndexByte(rest[q1+1:], '"')
		if open < 0 || shut < open || q1 < 0 || q2 < 0 {
			t.Fatalf("monitor: line %q", line)
		}
		name := strings.ToLower(rest[q1+1 : q1+1+q2])
		if strings.HasSuffix(line[open:shut], " lua") {
			name = "lua:" + name
		}
		out = append(out, name)
	}
}
