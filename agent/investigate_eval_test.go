package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/investigate/eval"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
)

// scriptedModel plays a scenario for every investigation it is asked
// for: its tool calls turn by turn, then the answer of that
// investigation's parent task (by id), with {task:NAME} filled from the
// conversation.
type scriptedModel struct {
	mu      sync.Mutex
	s       eval.Scenario
	answers map[string]string // parent task id → answer JSON
	reqs    int
}

func (*scriptedModel) Name() string { return "scripted" }

var parentIDRE = regexp.MustCompile(`The output above is task (\S+)\.`)

func (m *scriptedModel) Complete(_ context.Context, req report.Request) (report.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs++
	r := report.Response{InputTokens: 1000, OutputTokens: 100, FinishReason: "end_turn"}
	turn := 0
	for _, msg := range req.Messages {
		if msg.Role == report.RoleAssistant && len(msg.ToolCalls) > 0 {
			turn++
		}
	}
	if len(req.Tools) > 0 && turn < len(m.s.Script) {
		for i, c := range m.s.Script[turn] {
			in := map[string]string{}
			for k, v := range c.Params {
				in[k] = v
			}
			if c.Host != "" {
				in["host"] = c.Host
			}
			b, _ := json.Marshal(in)
			r.ToolCalls = append(r.ToolCalls, report.ToolCall{ID: fmt.Sprintf("t%d-%d", turn, i), Name: c.Tool, Input: b})
		}
		r.FinishReason = "tool_use"
		return r, nil
	}
	conv := eval.Transcript(req.System, req.Messages)
	parent := ""
	if p := parentIDRE.FindStringSubmatch(conv); p != nil {
		parent = p[1]
	}
	r.Text = eval.Fill(m.answers[parent], conv)
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
		"timeout: 120s, on: [failed, succeeded], workers: 4, investigate: {max_steps: 4, prices: {'%s': {input_per_mtok: %g, output_per_mtok: %g}}}}\n",
		model, model, priceIn, priceOut)
	b.WriteString("lifecycle: {drain_timeout: 1m}\n")
	return b.String()
}

// runScenario runs s once for each answer through one real agent (memory
// queue and state, the real runner, limiter and records) with the
// scripted model: parent task i on host s.Host+"-i" (its own limiter
// keys) answered answers[i]. It returns each parent's report and the
// store.
func runScenario(t *testing.T, s eval.Scenario, answers ...string) ([]report.Result, state.Store) {
	t.Helper()
	m := &scriptedModel{s: s, answers: map[string]string{}}
	ids := make([]string, len(answers))
	for i, a := range answers {
		ids[i] = fmt.Sprintf("parent-%d", i+1)
		m.answers[ids[i]] = a
	}
	return runScenarioWith(t, s, m, "m", 3, 15, 60*time.Second, ids...)
}

// runScenarioWith runs s with provider p as model, priced per million
// tokens, one parent task per id, waiting at most wait for the reports.
func runScenarioWith(t *testing.T, s eval.Scenario, p report.Provider, model string, priceIn, priceOut float64, wait time.Duration,
	ids ...string) ([]report.Result, state.Store) {
	t.Helper()
	cfg, err := config.Load([]byte(scenarioYAML(t, s, model, priceIn, priceOut)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-eval", Hostname: "eval-host", Reports: &hooks.ReportParts{Provider: p}})
	defer stop()
	for i, id := range ids {
		host := s.Host
		if i > 0 {
			host = fmt.Sprintf("%s-%d", s.Host, i)
		}
		body := fmt.Sprintf(`{"id":%q,"host":%q,"diagnostic":%q,"alert":{"source":"generic","name":%q}}`, id, host, s.Parent.Name, s.Alert)
		if _, err := ma.src.Send(context.Background(), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]report.Result, len(ids))
	for i, id := range ids {
		_, out[i] = ma.waitReport(t, id, wait)
	}
	return out, ma.store
}

// evalRanOn is the agent runScenarioWith runs, as records name it.
var evalRanOn = taskview.RanOn{InstanceID: "i-eval", Hostname: "eval-host"}

// TestInvestigationScenarios runs every scenario through the real agent
// with the scripted model, once for each of its answers: the two right
// answers (in different words) pass the grader; every adversarial answer
// that applies (keyword stuffing, negation, fabricated or misattributed
// quotes, "inconclusive" listing every cause, the injected cause, a
// plausible wrong cause) fails it. Every tool call has its own task
// record with parent, investigation and step; refusals are under Gaps.
func TestInvestigationScenarios(t *testing.T) {
	scenarios := eval.Scenarios()
	if len(scenarios) < 20 {
		t.Fatalf("%d scenarios, want at least 20", len(scenarios))
	}
	var rows []eval.Row
	t.Cleanup(func() {
		// The table scripts/investigate-eval prints, here for the scripted
		// model's right answers: every one passes.
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
			adv := eval.Adversarial(s)
			answers := []string{s.Right.JSON(), s.Alt.JSON()}
			for _, a := range adv {
				answers = append(answers, a.Ans.JSON())
			}
			results, store := runScenario(t, s, answers...)
			rows = append(rows, eval.RowOf(s, results[0]))
			for i, res := range results[:2] {
				if pass, why := eval.Grade(s, res); !pass {
					t.Errorf("right answer %d graded fail: %s\n%s", i+1, why, res.Markdown)
				}
			}
			for i, a := range adv {
				res := results[2+i]
				if pass, _ := eval.Grade(s, res); pass {
					t.Errorf("%s graded pass:\n%s", a.Name, res.Markdown)
				}
				if a.Name == "fabricated quotes" && (res.Grounding == nil || len(res.Grounding.Unverified) == 0 || res.Confidence == report.ConfidenceConfirmed) {
					t.Errorf("fabricated quotes: grounding %+v confidence %s, want them unverified and not confirmed", res.Grounding, res.Confidence)
				}
			}
			res := results[0]
			rec := res.Investigation
			if res.Status != report.StatusOK || rec == nil || (rec.EndedBy != "answer" && rec.EndedBy != "max_steps") || res.Answer == nil {
				t.Fatalf("report %+v", res)
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
			if rec.CostUSD <= 0 || (s.Truth.Category != report.CategoryUnknown && len(rec.Evidence) == 0) {
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
		res, _ := runScenarioWith(t, s, p, model, in, out, 10*time.Minute, "parent-1")
		row := eval.RowOf(s, res[0])
		rows = append(rows, row)
		fmt.Println(row)
		if os.Getenv("AUTODIAG_INVESTIGATE_EVAL_VERBOSE") != "" {
			fmt.Printf("\n%s\n\n", res[0].Markdown)
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

// A task whose route says `investigate: always` is investigated although
// its diagnostic succeeded and report.on is [failed]; the model's first
// message carries the alert's context (labels, annotations with the
// runbook URL, its start, the route, the time now), redacted.
func TestInvestigateAlwaysSucceeded(t *testing.T) {
	s := eval.Scenarios()[1] // inode-exhaustion: its first diagnostic succeeds
	yaml := strings.Replace(scenarioYAML(t, s, "m", 0, 0), "on: [failed, succeeded]", "on: [failed]", 1)
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	model := &recordingModel{}
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-eval", Reports: &hooks.ReportParts{Provider: model}})
	defer stop()
	body := `{"id":"p1","host":"web-3","diagnostic":"disk_free","alert":{"source":"alertmanager","name":"DiskWriteErrors",` +
		`"route":"disk","investigate":"always","starts_at":"2026-03-03T10:00:00Z",` +
		`"labels":{"instance":"web-3:9100","team":"storage"},` +
		`"annotations":{"runbook_url":"https://wiki.example.com/runbooks/disk","summary":"writes fail with password=hunter2hunter2"}}}`
	if _, err := ma.src.Send(context.Background(), []byte(body)); err != nil {
		t.Fatal(err)
	}
	rec, r := ma.waitReport(t, "p1", 30*time.Second)
	if rec.Outcome != "succeeded" || r.Investigation == nil {
		t.Fatalf("outcome %s, report %+v", rec.Outcome, r)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	first := model.reqs[0].Messages[0].Text
	for _, want := range []string{"# Alert context\nNow: ", "Started: 2026-03-03T10:00:00Z", "Route: disk", "- team: storage",
		"- runbook_url: https://wiki.example.com/runbooks/disk", "Categories: disk_full"} {
		if !strings.Contains(first, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "hunter2hunter2") {
		t.Errorf("a secret in an annotation reached the prompt:\n%s", first)
	}
}

// flakyModel answers 429 to the requests whose numbers are in failAt,
// and passes the rest to the scripted model.
type flakyModel struct {
	*scriptedModel
	mu      sync.Mutex
	n       int
	failAt  map[int]bool
	refused int
}

func (f *flakyModel) Complete(ctx context.Context, req report.Request) (report.Response, error) {
	f.mu.Lock()
	f.n++
	fail := f.failAt[f.n]
	if fail {
		f.refused++
	}
	f.mu.Unlock()
	if fail {
		return report.Response{}, &report.Error{Provider: "scripted", StatusCode: 429, Err: fmt.Errorf("rate limited")}
	}
	return f.scriptedModel.Complete(ctx, req)
}

// Through the real agent: a 429 in the middle of an investigation is
// retried and the investigation completes; with daily_tokens_hard the
// fleet's daily tokens never pass the cap across five alerts, and the
// investigations past it end daily_budget.
func TestInvestigationRobustThroughAgent(t *testing.T) {
	s := eval.Scenarios()[0]
	const capTokens = 8000
	yaml := strings.Replace(scenarioYAML(t, s, "m", 0, 0), "investigate: {max_steps: 4,",
		fmt.Sprintf("investigate: {max_steps: 4, daily_tokens: %d, daily_tokens_hard: true,", capTokens), 1)
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"parent-1", "parent-2", "parent-3", "parent-4", "parent-5"}
	sm := &scriptedModel{s: s, answers: map[string]string{}}
	for _, id := range ids {
		sm.answers[id] = s.Right.JSON()
	}
	model := &flakyModel{scriptedModel: sm, failAt: map[int]bool{2: true}}
	budget := investigate.NewMemoryBudget(capTokens, 0, nil)
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-eval", Reports: &hooks.ReportParts{Provider: model, Budget: budget}})
	defer stop()
	ended := map[string]int{}
	for i, id := range ids {
		body := fmt.Sprintf(`{"id":%q,"host":"web-%d","diagnostic":%q,"alert":{"source":"generic","name":%q}}`, id, i+1, s.Parent.Name, s.Alert)
		if _, err := ma.src.Send(context.Background(), []byte(body)); err != nil {
			t.Fatal(err)
		}
		_, r := ma.waitReport(t, id, 60*time.Second) // one at a time: the cap is checked after each
		ended[r.Investigation.EndedBy]++
		if used, _, _ := budget.Used(context.Background()); used > capTokens {
			t.Fatalf("after %s: %d tokens spent, cap %d", id, used, capTokens)
		}
		if i == 0 {
			st := r.Investigation.Steps
			if r.Status != report.StatusOK || len(st) != 2 || st[1].Attempts != 2 || model.refused != 1 {
				t.Fatalf("the first investigation: %s (%s), steps %+v, %d refused", r.Status, r.Reason, st, model.refused)
			}
			if pass, why := eval.Grade(s, r); !pass {
				t.Fatalf("graded fail after the retry: %s", why)
			}
		}
	}
	if ended["daily_budget"] == 0 {
		t.Fatalf("ended by %v: the cap never stopped an investigation", ended)
	}
}
