package investigate

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/fake/bedrockfake"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
)

// TestThroughBothProviders runs an investigation (two tool turns, a
// budget end, the last turn without tools) through the real clients and
// the fakes, which check each request against their API's rules: tool
// results answer the calls of the turn before, roles alternate, the last
// turn carries no tool blocks.
func TestThroughBothProviders(t *testing.T) {
	ic := Config{MaxSteps: 2}
	ev := parentEvidence()
	t.Run("openai", func(t *testing.T) {
		f := openaifake.New()
		defer f.Close()
		f.Queue(openaifake.Reply{ToolCalls: []openaifake.ToolCall{{ID: "c1", Name: "journal", Arguments: `{}`}, {ID: "c2", Name: "nope", Arguments: `{}`}}},
			openaifake.Reply{ToolCalls: []openaifake.ToolCall{{ID: "c3", Name: "disk_usage", Arguments: `{"path":"/var/log"}`}}},
			openaifake.Reply{Text: providerAnswer})
		tasks := newFakeTasks(testTools, map[string]string{"journal": "ok\n", "disk_usage": "7.9G /var/log\n"})
		iv, err := New(Options{Report: testReportConfig(), Config: ic, Provider: report.NewOpenAI(f.BaseURL(), "k", &http.Client{}),
			Tools: testTools, Tasks: tasks, NewID: func() string { return "inv-1" }})
		if err != nil {
			t.Fatal(err)
		}
		checkThroughProvider(t, iv.Run(context.Background(), ev), len(f.Requests()), string(f.Requests()[2].Body))
	})
	t.Run("bedrock", func(t *testing.T) {
		f := bedrockfake.New()
		defer f.Close()
		f.Queue(bedrockfake.Reply{ToolUses: []bedrockfake.ToolUse{{ID: "c1", Name: "journal", Input: `{}`}, {ID: "c2", Name: "nope", Input: `{}`}}},
			bedrockfake.Reply{ToolUses: []bedrockfake.ToolUse{{ID: "c3", Name: "disk_usage", Input: `{"path":"/var/log"}`}}},
			bedrockfake.Reply{ToolUses: []bedrockfake.ToolUse{{ID: "c4", Name: report.AnswerToolName, Input: providerAnswer}}})
		tasks := newFakeTasks(testTools, map[string]string{"journal": "ok\n", "disk_usage": "7.9G /var/log\n"})
		awsCfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "s", "")}
		p := report.NewBedrock(awsCfg, report.Guardrail{}, func(o *bedrockruntime.Options) { o.BaseEndpoint = aws.String(f.URL) })
		rc := testReportConfig()
		rc.Provider = report.ProviderBedrock
		iv, err := New(Options{Report: rc, Config: ic, Provider: p, Tools: testTools, Tasks: tasks, NewID: func() string { return "inv-1" }})
		if err != nil {
			t.Fatal(err)
		}
		res := iv.Run(context.Background(), ev)
		last := string(f.Requests()[2].Body)
		if !strings.Contains(last, `"toolConfig"`) || !strings.Contains(last, report.AnswerToolName) || strings.Contains(last, `"name":"journal"`) {
			t.Fatalf("the last request offers other tools than %s: %s", report.AnswerToolName, last)
		}
		checkThroughProvider(t, res, len(f.Requests()), last[:strings.Index(last, `"toolConfig"`)])
	})
}

// providerAnswer is a structured answer citing the disk_usage call.
const providerAnswer = `{"root_cause":"/var/log holds 7.9G.","category":"disk_full","confidence":"confirmed","impact":"writes fail",` +
	`"gaps":[],"next_steps":["du -sh /var/log/*"],"evidence":[{"task_id":"inv-1-s2-c1","quote":"7.9G /var/log","claim":"the logs fill the disk"}]}`

func checkThroughProvider(t *testing.T, res report.Result, requests int, last string) {
	t.Helper()
	rec := res.Investigation
	if res.Status != report.StatusOK || rec.EndedBy != endedMaxSteps || requests != 3 {
		t.Fatalf("result %s %q ended by %s after %d requests", res.Status, res.Reason, rec.EndedBy, requests)
	}
	calls := allCalls(rec)
	if len(calls) != 3 || calls[0].Result != ResultRan || calls[1].Result != ResultNotOffered || calls[2].Result != ResultRan {
		t.Fatalf("calls %+v", calls)
	}
	if strings.Contains(last, `"tools"`) || strings.Contains(last, "toolConfig") || !strings.Contains(last, "7.9G /var/log") {
		t.Fatalf("the last request has tools or lacks the results: %s", last)
	}
	if res.Answer == nil || res.Grounding == nil || res.Grounding.Verified != 1 || res.Confidence != report.ConfidenceConfirmed {
		t.Fatalf("answer %+v grounding %+v", res.Answer, res.Grounding)
	}
	if rec.InputTokens == 0 || len(rec.Steps) != 3 {
		t.Fatalf("record %+v", rec)
	}
}
