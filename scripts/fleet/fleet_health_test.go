package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAgentWarningsCountsByMessage: warnings and errors of every agent
// log are counted by level and message, with how many agents logged each
// and the earliest time; other levels and lines that are not JSON are not.
func TestAgentWarningsCountsByMessage(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]string{
		"a.stderr.jsonl": `{"time":"10:00:02","level":"WARN","msg":"redis slow","err":"i/o timeout"}
{"time":"10:00:01","level":"WARN","msg":"redis slow","err":"i/o timeout"}
{"time":"10:00:03","level":"INFO","msg":"ready"}
not json
`,
		"b.stderr.jsonl": `{"time":"09:59:59","level":"WARN","msg":"redis slow"}
{"time":"10:00:05","level":"ERROR","msg":"exit"}
`,
		"c.yaml": `{"time":"09:00:00","level":"WARN","msg":"not a log"}
`,
	}
	for name, body := range logs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := agentWarnings(dir)
	want := []logCount{
		{Level: "WARN", Msg: "redis slow", Lines: 3, Agents: 2, First: "09:59:59", Err: "i/o timeout"},
		{Level: "ERROR", Msg: "exit", Lines: 1, Agents: 1, First: "10:00:05"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
