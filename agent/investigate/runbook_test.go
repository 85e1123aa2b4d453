package investigate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
)

// TestRunbookInPrompt: the runbook whose alert pattern and labels match is
// given to the model, cut to MaxRunbookBytes and redacted; another
// alert's is not; a file that cannot be read is an error naming its key.
func TestRunbookInPrompt(t *testing.T) {
	files := map[string]string{
		"/etc/autodiag/runbooks/disk.md": "# Disk full\nCheck /var/log first. password=hunter2hunter2\n" + strings.Repeat("more text\n", 2000),
		"/etc/autodiag/runbooks/dns.md":  "# DNS\nCheck resolv.conf.\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	rbs, err := report.LoadRunbooks([]report.Runbook{
		{Alert: "^Disk", Labels: map[string]string{"team": "storage"}, File: "/etc/autodiag/runbooks/disk.md"},
		{Alert: "DNS", File: "/etc/autodiag/runbooks/dns.md"}}, read)
	if err != nil {
		t.Fatal(err)
	}
	model := &scripted{turns: []report.Response{answer("x")}}
	iv, _ := newTest(t, Config{}, model, nil)
	iv.o.Runbooks = rbs
	red, err := redact.New(redact.DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	iv.o.Redactor = red
	ev := parentEvidence()
	ev.Alert.Labels = map[string]string{"team": "storage"}
	iv.Run(context.Background(), ev)
	first := model.reqs[0].Messages[0].Text
	if !strings.Contains(first, "# Runbook (/etc/autodiag/runbooks/disk.md)") || !strings.Contains(first, "Check /var/log first.") ||
		strings.Contains(first, "hunter2hunter2") || strings.Count(first, "more text") > report.MaxRunbookBytes/10 {
		t.Fatalf("prompt:\n%s", first[:min(len(first), 3000)])
	}
	if _, _, ok := rbs.For(taskview.Alert{Name: "DiskFull", Labels: map[string]string{"team": "web"}}); ok {
		t.Fatal("a runbook for another team's alert")
	}
	if _, err := report.LoadRunbooks([]report.Runbook{{Alert: "x", File: "/nope.md"}}, read); err == nil || !strings.Contains(err.Error(), "report.runbooks[0].file") {
		t.Fatalf("LoadRunbooks = %v", err)
	}
}
