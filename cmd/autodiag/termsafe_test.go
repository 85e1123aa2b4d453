package main

import (
	"bytes"
	"encoding/json"
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
		{"file\u202eexe.txt", `file\u202eexe.txt`},
		{"\u202a\u202b\u202c\u202d \u2066\u2067\u2068\u2069 \u200e\u200f\u061c", `\u202a\u202b\u202c\u202d \u2066\u2067\u2068\u2069 \u200e\u200f\u061c`},
		{"zero\u200bwidth space and \u2028 stay", "zero\u200bwidth space and \u2028 stay"},
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

// TestJSONOutEscapesHiddenRunes: show --json (and the other --json forms)
// write C1 and bidi controls, and DEL, as JSON escapes, so a terminal shows
// them instead of obeying them, and the JSON decodes to the same record.
func TestJSONOutEscapesHiddenRunes(t *testing.T) {
	v := taskview.Task{ID: "t1", Status: "done", Outcome: "succeeded",
		Output: "csi \u009b2J rtl file\u202eexe.txt isolate \u2067x\u2069 mark \u200f del \x7f é\n",
		Params: map[string]string{"p": "\u202dforced"}}
	var b bytes.Buffer
	enc := json.NewEncoder(jsonOut(&b, false))
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	for _, r := range []rune{0x9b, 0x202e, 0x2067, 0x2069, 0x200f, 0x202d, 0x7f} {
		if strings.ContainsRune(b.String(), r) {
			t.Errorf("--json wrote U+%04X raw:\n%s", r, b.String())
		}
	}
	if !strings.Contains(b.String(), `\u202e`) || !strings.Contains(b.String(), `\u009b`) || !strings.Contains(b.String(), "é") {
		t.Errorf("--json = %s; want the controls escaped and é kept", b.String())
	}
	var back taskview.Task
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Output != v.Output || back.Params["p"] != v.Params["p"] {
		t.Errorf("the escaped JSON decodes to %+v, %v; want the record as it was", back, err)
	}
	var raw bytes.Buffer
	_, _ = jsonOut(&raw, true).Write([]byte("\u202e"))
	if raw.String() != "\u202e" {
		t.Errorf("--raw changed the bytes: %q", raw.String())
	}
}
