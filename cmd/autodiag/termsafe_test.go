package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/taskview"
)

func TestTerminalOut(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain\ttext\n", "plain\ttext\n"},
		{"\x1b]0;pwned\x07\x1b[2J", `\x1b]0;pwned\x07\x1b[2J`},
		{"a\rb\x00c\x7f", `a\x0db\x00c\x7f`},
		{"csi \u009b2J ok é", `csi \u009b2J ok é`},
		{"bad \xff utf8", `bad \xff utf8`},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		n, err := terminalOut(&b, false).Write([]byte(tt.in))
		if err != nil || n != len(tt.in) {
			t.Errorf("Write(%q) = %d, %v", tt.in, n, err)
		}
		if b.String() != tt.want {
			t.Errorf("Write(%q) wrote %q, want %q", tt.in, b.String(), tt.want)
		}
	}
	var raw bytes.Buffer
	_, _ = terminalOut(&raw, true).Write([]byte("\x1b[2J"))
	if raw.String() != "\x1b[2J" {
		t.Errorf("--raw changed the bytes: %q", raw.String())
	}
}

// show prints an output holding escape sequences visibly; --raw keeps them.
func TestPrintTaskEscapes(t *testing.T) {
	v := taskview.Task{ID: "t1", Status: "done", Outcome: "succeeded", Output: "title \x1b]0;x\x07 clear \x1b[2J\n",
		Params: map[string]string{"p": "\x1b[31mred"}}
	var b bytes.Buffer
	printTask(terminalOut(&b, false), v)
	if strings.Contains(b.String(), "\x1b") || !strings.Contains(b.String(), `\x1b]0;x\x07`) {
		t.Errorf("printed %q", b.String())
	}
}
