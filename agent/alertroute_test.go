package agent

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/outcome"
)

const alarmConfig = `
workers: 2
diagnostics:
  - name: uptime
    command: [/bin/echo, "{host}"]
    timeout: 10s
limiter:
  hosts:
    allow: ['^[a-z0-9-]+$']
routes:
  - name: ec2-status
    match: {source: [cloudwatch], name: '^StatusCheckFailed'}
    host: '{{ .Dimensions.InstanceId }}'
    tasks: [{diagnostic: uptime}]
`

// TestQueueAlarmBecomesItsRouteTasks: a CloudWatch alarm in its SNS
// envelope on the task queue runs its route's task and is counted as an
// alert, not as a task; an OK transition is ignored; an SNS message that
// is not an alarm is rejected; a plain task still runs.
func TestQueueAlarmBecomesItsRouteTasks(t *testing.T) {
	ta := startAgent(t, alarmConfig)
	alarm, err := os.ReadFile("alert/testdata/sns_cloudwatch_alarm.json")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := os.ReadFile("alert/testdata/sns_cloudwatch_ok.json")
	if err != nil {
		t.Fatal(err)
	}
	notAlarm := `{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:eu-west-1:1:t","Message":"hello"}`
	for _, b := range []string{string(alarm), string(ok), notAlarm, `{"id":"plain","host":"web-1","diagnostic":"uptime"}`} {
		if _, err := ta.d.Source.Send(t.Context(), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the alarm's task and the plain task to run, the bad envelope to be rejected", func() bool {
		return ta.outcome(outcome.Succeeded) == 2 && ta.outcome(outcome.Rejected) == 1
	})
	alerts := func(result string) float64 { return alertsTotal(t, ta.Agent, alert.SourceCloudWatch, result) }
	waitFor(t, "the alerts to be counted", func() bool {
		return alerts(alert.ResultAccepted) == 1 && alerts(alert.ResultIgnored) == 1 && alerts(alert.ResultRejected) == 1
	})
	recs := ta.Status()
	if n := recs.Outcomes[outcome.Succeeded] + recs.Outcomes[outcome.Rejected]; n != 3 {
		t.Fatalf("outcomes %v: the accepted and ignored envelopes must have no task outcome", recs.Outcomes)
	}
}

// alertsTotal reads autodiag_alerts_total{source,result} from the agent's
// registry.
func alertsTotal(t *testing.T, a *Agent, source, result string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "autodiag_alerts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestCloudWatchOKStampsResolvedAt: an alarm's OK, which names the alarm
// and not the firing, stamps resolved_at on the report of the task the
// ALARM made, as Alertmanager's resolved does, and starts nothing.
func TestCloudWatchOKStampsResolvedAt(t *testing.T) {
	ta := startAgent(t, alarmConfig)
	alarm, err := os.ReadFile("alert/testdata/sns_cloudwatch_alarm.json")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := os.ReadFile("alert/testdata/sns_cloudwatch_ok.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ta.d.Source.Send(t.Context(), alarm); err != nil {
		t.Fatal(err)
	}
	// Counted once the record, and with it the alert's task index, is written.
	waitFor(t, "the alarm's task to run", func() bool { return ta.outcome(outcome.Succeeded) == 1 })
	entries, err := ta.d.Store.RecentAudit(t.Context(), 10)
	if err != nil || len(entries) != 1 {
		t.Fatalf("audit %+v %v", entries, err)
	}
	id := entries[0].TaskID
	created := time.Now().UTC().Add(-time.Minute)
	rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: created})
	if _, err := ta.d.Store.SetReport(t.Context(), id, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.d.Source.Send(t.Context(), ok); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the OK to stamp the report", func() bool {
		rec, _, _ := ta.d.Store.Task(t.Context(), id)
		var r report.Result
		return json.Unmarshal(rec.Report, &r) == nil && r.ResolvedAt != nil && !r.ResolvedAt.Before(created)
	})
	if n := ta.outcome(outcome.Succeeded); n != 1 {
		t.Fatalf("%d tasks succeeded: the OK started one", n)
	}
}
