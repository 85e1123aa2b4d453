package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFeedbackCommands: `feedback` posts the verdict to the agent's admin
// API, a bad verdict is a usage error before any call, and `report-stats`
// prints the agent's table.
func TestFeedbackCommands(t *testing.T) {
	t.Setenv("AUTODIAG_CONFIG", "")
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/reports/stats" {
			_ = json.NewEncoder(w).Encode(map[string]any{"verdicts": 3, "resolutions": 4, "rows": []map[string]any{
				{"diagnostic": "uptime", "confidence": "likely", "good": 2, "wrong": 1, "precision": 2.0 / 3,
					"resolved": 4, "resolved_within_1h": 1, "resolved_within_1h_share": 0.25}}})
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"feedback":{}}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRoot(&out, &errb)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	if _, err := run("feedback", "t-1", "good", "--by", "ana", "--note", "spot on", "--admin-addr", addr); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != `POST /v1/tasks/t-1/feedback {"by":"ana","note":"spot on","verdict":"good"}` {
		t.Fatalf("requests %q", got)
	}
	var ue usageError
	if _, err := run("feedback", "t-1", "meh", "--by", "ana", "--admin-addr", addr); err == nil || !errors.As(err, &ue) || len(got) != 1 {
		t.Fatalf("bad verdict: %v, %d requests; want a usage error and none", err, len(got))
	}
	out, err := run("report-stats", "--admin-addr", addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "DIAGNOSTIC") || !strings.Contains(out, "uptime") || !strings.Contains(out, "67%") || !strings.Contains(out, "25%") ||
		!strings.Contains(out, "3 verdicts, 4 resolved reports") {
		t.Fatalf("report-stats printed:\n%s", out)
	}
}
