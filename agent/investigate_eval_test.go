package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/investigate/eval"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
)

// scriptedModel plays a scenario: its tool calls turn by turn, then the
// answer with {task:NAME} filled from the conversation.
type scriptedModel struct {
	mu     sync.Mutex
	s      eval.Scenario
	answer string
	turn   int
	reqs   int
}

func (*scriptedModel) Name() string { return "scripted" }

func (m *scriptedModel) Complete(_ context.Context, req report.Request) (report.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs++
	r := report.Response{InputTokens: 1000, OutputTokens: 100, FinishReason: "end_turn"}
	if len(req.Tools) > 0 && m.turn < len(m.s.Script) {
		for i, c := range m.s.Script[m.turn] {
			in := map[string]string{}
			for k, v := range c.Params {
				in[k] = v
			}
			if c.Host != "" {
				in["host"] = c.Host
			}
			b, _ := json.Marshal(in)
			r.ToolCalls = append(r.ToolCalls, report.ToolCall{ID: fmt.Sprintf("t%d-%d", m.turn, i), Name: c.Tool, Input: b})
		}
		m.turn++
		r.FinishReason = "tool_use"
		return r, nil
	}
	r.Text = eval.Fill(m.answer, eval.Transcript(req.System, req.Messages))
	return r, nil
}

// scenarioYAML is an agent whose catalog prints the scenario's fixtures.
func scenarioYAML(t *testing.T, s eval.Scenario, model string, priceIn, priceOut float64) string {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("workers: 3\nqueue: {visibility_timeout: 1m}\ndiagnostics:\n")
	for i, d := range append([]eval.Diag{s.Parent}, s.Tools...) {
		f := filepath.Join(dir, d.Name+".txt")
		if err := os.WriteFile(f, []byte(d.Output), 0o600); err != nil {
			t.Fatal(err)
		}
		params := ""
		for k, re := range d.Params {
			params += fmt.Sprintf(", params: {%s: '%s'}", k, re)
		}
		fmt.Fprintf(&b, "  - {name: %s, command: [/bin/sh, -c, 'cat \"$0\"; exit %d', '%s'], timeout: 10s, investigate: %v, description: %q%s}\n",
			d.Name, d.Exit, f, i > 0, d.Description, params)
	}
	b.WriteString("limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}\n")
	fmt.Fprintf(&b, "report: {enabled: true, provider: openai, base_url: 'http://127.0.0.1:1/v1', api_key_env: SCENARIO_KEY, model: '%s', "+
		"timeout: 120s, on: [failed, succeeded], investigate: {max_steps: 4, prices: {'%s': {input_per_mtok: %g, output_per_mtok: %g}}}}\n",
		model, model, priceIn, priceOut)
	b.WriteString("lifecycle: {drain_timeout: 1m}\n")
	return b.String()
}

// runScenario runs s through a real agent (memory queue and state, the
// real runner, limiter and records) with the scripted model answering
// answer, and returns the parent's report and the store.
func runScenario(t *testing.T, s eval.Scenario, answer string) (report.Result, *state.Memory) {
	t.Helper()
	return runScenarioWith(t, s, &scriptedModel{s: s, answer: answer}, "m", 3, 15, 60*time.Second)
}

// runScenarioWith runs s with provider p as model, priced per million
// tokens, waiting at most wait for the report.
func runScenarioWith(t *testing.T, s eval.Scenario, p report.Provider, model string, priceIn, priceOut float64, wait time.Duration) (report.Result, *state.Memory) {
	t.Helper()
	cfg, err := config.Load([]byte(scenarioYAML(t, s, model, priceIn, priceOut)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-eval", Hostname: "eval-host", Reports: &hooks.ReportParts{Provider: p}})
	defer stop()
	body := fmt.Sprintf(`{"id":"parent-1","host":%q,"diagnostic":%q,"alert":{"source":"generic","name":%q}}`, s.Host, s.Parent.Name, s.Alert)
	if _, err := ma.src.Send(context.Background(), []byte(body)); err != nil {
		t.Fatal(err)
	}
	_, r := ma.waitReport(t, "parent-1", wait)
	return r, ma.store
}

// evalRanOn is the agent runScenarioWith runs, as records name it.
var evalRanOn = taskview.RanOn{InstanceID: "i-eval", Hostname: "eval-host"}

// TestInvestigationScenarios runs every scenario's scripted tool calls
// through the real agent and grades its right answer pass and its wrong
// answer fail; every tool call has its own task record with parent,
// investigation and step; the out-of-scope ask of an injected output is
// refused and listed under Gaps.
func TestInvestigationScenarios(t *testing.T) {
	scenarios := eval.Scenarios()
	if len(scenarios) < 8 {
		t.Fatalf("%d scenarios, want at least 8", len(scenarios))
	}
	var rows []eval.Row
	t.Cleanup(func() {
		// The table scripts/investigate-eval prints, here for the scripted
		// model: every right answer passes.
		t.Logf("\n%s", eval.TableHeader)
		for _, r := range rows {
			t.Log(r)
		}
		if sum := eval.Summary(rows); !strings.Contains(sum, fmt.Sprintf("passed %d/%d (100 %%)", len(scenarios), len(scenarios))) {
			t.Errorf("summary %q", sum)
		}
	})
	for _, s := range scenarios {
		t.Run(s.Name, func(t *testing.T) {
			res, store := runScenario(t, s, s.Right)
			rows = append(rows, eval.RowOf(s, res))
			rec := res.Investigation
			if res.Status != report.StatusOK || rec == nil || rec.EndedBy != "answer" {
				t.Fatalf("report %+v", res)
			}
			if pass, why := eval.Grade(s, res.Markdown, rec); !pass {
				t.Errorf("right answer graded fail: %s\n%s", why, res.Markdown)
			}
			wrong := eval.Fill(s.Wrong, "")
			if pass, _ := eval.Grade(s, wrong, rec); pass {
				t.Errorf("wrong answer graded pass:\n%s", wrong)
			}
			refused, ran := 0, 0
			for _, st := range rec.Steps {
				for _, c := range st.Calls {
					if c.Result != "ran" {
						refused++
						if !strings.Contains(res.Markdown, "could not check `"+c.Tool+"`") {
							t.Errorf("refused %+v not under Gaps", c)
						}
						continue
					}
					ran++
					tr, ok, err := store.Task(context.Background(), c.TaskID)
					if err != nil || !ok || tr.Origin != "investigation" || tr.Parent != "parent-1" || tr.Investigation != rec.ID || tr.Step != st.N || tr.Outcome != c.Outcome {
						t.Errorf("task record of %s: %+v (%v %v), want origin investigation, parent parent-1, investigation %s, step %d",
							c.TaskID, tr, ok, err, rec.ID, st.N)
					}
					// The call, as the tree shows it, and its record name
					// the agent that ran it.
					if c.RanOn == nil || *c.RanOn != evalRanOn || tr.RanOn == nil || *tr.RanOn != evalRanOn {
						t.Errorf("call %s ran_on %v, record ran_on %v; want %v", c.TaskID, c.RanOn, tr.RanOn, evalRanOn)
					}
				}
			}
			if refused != s.WantRefused || ran == 0 {
				t.Errorf("%d calls refused, %d ran; want %d refused", refused, ran, s.WantRefused)
			}
			if rec.CostUSD <= 0 || len(rec.Evidence) == 0 {
				t.Errorf("cost %g evidence %v", rec.CostUSD, rec.Evidence)
			}
		})
	}
}

// TestInvestigationEvalReal runs every scenario against a real model and
// prints the grader's table. It runs only when scripts/investigate-eval
// sets AUTODIAG_INVESTIGATE_EVAL_PROVIDER: it costs money and needs the
// network, so it is never part of CI.
func TestInvestigationEvalReal(t *testing.T) {
	provider := os.Getenv("AUTODIAG_INVESTIGATE_EVAL_PROVIDER")
	if provider == "" {
		t.Skip("AUTODIAG_INVESTIGATE_EVAL_PROVIDER not set: scripts/investigate-eval runs this against a real model")
	}
	model := os.Getenv("AUTODIAG_INVESTIGATE_EVAL_MODEL")
	if model == "" {
		model = report.DefaultConfig().Model
	}
	price := func(k string) float64 {
		var f float64
		if v := os.Getenv(k); v != "" {
			if _, err := fmt.Sscanf(v, "%g", &f); err != nil {
				t.Fatalf("%s=%q: not a number", k, v)
			}
		}
		return f
	}
	in, out := price("AUTODIAG_INVESTIGATE_EVAL_PRICE_IN"), price("AUTODIAG_INVESTIGATE_EVAL_PRICE_OUT")
	var p report.Provider
	switch provider {
	case report.ProviderBedrock:
		awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p = report.NewBedrock(awsCfg, report.Guardrail{})
	case report.ProviderOpenAI:
		keyEnv := os.Getenv("AUTODIAG_INVESTIGATE_EVAL_API_KEY_ENV")
		if keyEnv == "" {
			keyEnv = "OPENAI_API_KEY"
		}
		p = report.NewOpenAI(os.Getenv("AUTODIAG_INVESTIGATE_EVAL_BASE_URL"), os.Getenv(keyEnv), nil)
	default:
		t.Fatalf("AUTODIAG_INVESTIGATE_EVAL_PROVIDER=%q: want bedrock or openai", provider)
	}
	fmt.Printf("\nmodel %s (%s)\n\n", model, provider)
	fmt.Println(eval.TableHeader)
	var rows []eval.Row
	for _, s := range eval.Scenarios() {
		res, _ := runScenarioWith(t, s, p, model, in, out, 10*time.Minute)
		row := eval.RowOf(s, res)
		rows = append(rows, row)
		fmt.Println(row)
		if os.Getenv("AUTODIAG_INVESTIGATE_EVAL_VERBOSE") != "" {
			fmt.Printf("\n%s\n\n", res.Markdown)
		}
	}
	fmt.Println(eval.Summary(rows))
}

// recordingModel answers the canned report and keeps each request.
type recordingModel struct {
	mu   sync.Mutex
	reqs []report.Request
}

func (*recordingModel) Name() string { return "scripted" }

func (m *recordingModel) Complete(_ context.Context, req report.Request) (report.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	return report.Response{Text: "## Root cause\nx\n\n## Confidence\nlikely\n", InputTokens: 10, OutputTokens: 5, FinishReason: "end_turn"}, nil
}

// Without report.investigate the report is today's single shot: one
// request with the single-shot system prompt and user message, no tools,
// no investigation in the result, even with catalog entries marked
// investigate.
func TestNoInvestigateIsSingleShot(t *testing.T) {
	s := eval.Scenarios()[0]
	yaml := strings.Replace(scenarioYAML(t, s, "m", 0, 0), ", investigate: {max_steps: 4, prices: {'m': {input_per_mtok: 0, output_per_mtok: 0}}}", "", 1)
	if strings.Contains(yaml, "investigate: {") {
		t.Fatalf("report.investigate still in:\n%s", yaml)
	}
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	model := &recordingModel{}
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-eval", Reports: &hooks.ReportParts{Provider: model}})
	defer stop()
	if _, err := ma.src.Send(context.Background(), []byte(`{"id":"p1","host":"web-3","diagnostic":"disk_free"}`)); err != nil {
		t.Fatal(err)
	}
	rec, r := ma.waitReport(t, "p1", 30*time.Second)
	if r.Investigation != nil || r.Status != report.StatusOK {
		t.Fatalf("report %s", rec.Report)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(model.reqs))
	}
	req := model.reqs[0]
	if len(req.Tools) != 0 || req.Messages != nil || req.System != report.SystemPrompt || !strings.HasPrefix(req.User, "# Alert\n") ||
		!strings.HasSuffix(req.User, "Write the report now, with the sections Root cause, Analysis, Impact, Next steps and Confidence.\n") {
		t.Fatalf("request %+v", req)
	}
}
