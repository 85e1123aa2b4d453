package investigate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// Origin is the task field `origin` of every tool call's task, which
// limiter rules can match.
const Origin = "investigation"

// Tool is one diagnostic of the catalog marked `investigate: true`:
// Params maps each parameter to the pattern its value must match in full.
type Tool struct {
	Name        string
	Description string
	Params      map[string]string
}

// TaskSpec is one tool call as a task: the agent validates, limits, runs,
// records and redacts it like any other.
type TaskSpec struct {
	ID            string
	Host          string
	Diagnostic    string
	Params        map[string]string
	Origin        string
	Parent        string
	Investigation string
	Step          int
}

// TaskRecord is what the agent recorded of a task: Outcome is one of the
// task outcomes (succeeded, failed, timed_out ran; rejected,
// rate_limited, duplicate, ... did not), Output is already redacted.
type TaskRecord struct {
	ID        string
	Outcome   string
	Reason    string
	ExitCode  *int
	Output    string
	Truncated bool
	// RanOn is the agent that ran the task: the machine its output
	// describes; nil when it did not run.
	RanOn *taskview.RanOn
}

// Tasks submits a task and waits for its record: the only way an
// investigation runs anything.
type Tasks interface {
	Submit(ctx context.Context, spec TaskSpec) (TaskRecord, error)
}

// Budget is the fleet-wide daily budget of tokens and cost. Left says
// whether any is left today; Spend counts what a model turn used.
type Budget interface {
	Left(ctx context.Context) (bool, error)
	Spend(ctx context.Context, tokens int64, costUSD float64) error
}

// Options are what an Investigator is built from; the narrow interfaces
// are the agent's.
type Options struct {
	// Report is the report section (model, temperature, max_tokens,
	// timeout, input bounds); Report.Investigate must be set.
	Report   report.Config
	Provider report.Provider
	// Tools are the diagnostics offered to the model.
	Tools []Tool
	Tasks Tasks
	// Budget nil is no daily budget.
	Budget Budget
	// Redactor is applied to the answer (tool outputs come redacted).
	Redactor report.Redactor
	// AllowHost is the agent's host allow-list; nil allows only the
	// alert's host whatever investigate.hosts says.
	AllowHost func(host string) bool
	Clock     clock.Clock
	// NewID returns an investigation id; nil: random.
	NewID   func() string
	Metrics *Metrics
}

// Investigator runs investigations: a model turn, its tool calls as
// tasks, again, until the model answers or a budget ends the loop; then
// one last turn without tools.
type Investigator struct {
	o     Options
	cfg   report.InvestigateConfig
	hosts *regexp.Regexp
	tools map[string]Tool
	specs []report.Tool
}

// New returns an Investigator of o.
func New(o Options) (*Investigator, error) {
	if o.Report.Investigate == nil {
		return nil, errors.New("investigate: report.investigate is not set")
	}
	cfg := o.Report.Investigate.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("investigate: %w", err)
	}
	iv := &Investigator{o: o, cfg: cfg, tools: map[string]Tool{}}
	if cfg.Hosts != "" {
		iv.hosts = regexp.MustCompile(cfg.Hosts) // checked by Validate
	}
	if iv.o.Clock == nil {
		iv.o.Clock = clock.Wall{}
	}
	if iv.o.NewID == nil {
		iv.o.NewID = randomID
	}
	for _, t := range o.Tools {
		iv.tools[t.Name] = t
		iv.specs = append(iv.specs, report.Tool{Name: t.Name, Description: t.Description, Schema: Schema(t)})
	}
	return iv, nil
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "inv-" + hex.EncodeToString(b[:])
}

// Schema is the JSON Schema of a tool's input: the host, and each param
// with its catalog pattern (anchored, as the agent matches it in full).
func Schema(t Tool) []byte {
	props := map[string]any{"host": map[string]any{"type": "string",
		"description": "The host to run on; leave out for the alert's host."}}
	required := []string{}
	for _, name := range slices.Sorted(maps.Keys(t.Params)) {
		props[name] = map[string]any{"type": "string", "pattern": "^(?:" + t.Params[name] + ")$"}
		required = append(required, name)
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props,
		"required": required, "additionalProperties": false})
	return b
}

// Results of a Call.
const (
	ResultRan          = "ran"
	ResultNotOffered   = "not_offered"
	ResultOutOfScope   = "host_out_of_scope"
	ResultBadArguments = "bad_arguments"
	ResultTooManyCalls = "too_many_calls"
	ResultBudgetSpent  = "budget_spent"
	ResultError        = "error"
	endedAnswer        = "answer"
	endedMaxSteps      = "max_steps"
	endedMaxTokens     = "max_tokens"
	endedWallTime      = "wall_time"
	endedDailyBudget   = "daily_budget"
	endedError         = "error"
)

// CallResults are every Call.Result a metric can carry, besides the task
// outcomes that did not run.
var CallResults = []string{ResultRan, ResultNotOffered, ResultOutOfScope, ResultBadArguments, ResultTooManyCalls,
	ResultBudgetSpent, ResultError, outcome.Rejected, outcome.RateLimited, outcome.Duplicate, outcome.Stale, outcome.Released}

// EndReasons are every Investigation.EndedBy.
var EndReasons = []string{endedAnswer, endedMaxSteps, endedMaxTokens, endedWallTime, endedDailyBudget, endedError}

// run is one investigation's state.
type run struct {
	iv    *Investigator
	ev    report.Evidence
	rec   *report.Investigation
	msgs  []report.Message
	price report.Price
	// summarised marks tool results already cut to their first lines.
	summarised map[[2]int]bool
}

// Generate is Run: an Investigator is a report.Writer.
func (iv *Investigator) Generate(ctx context.Context, ev report.Evidence) report.Result {
	return iv.Run(ctx, ev)
}

// Run investigates ev (the parent task and its output) and returns the
// report, with the investigation's record in Result.Investigation. Like
// Generator.Generate it never returns an error: failures are a Result.
func (iv *Investigator) Run(ctx context.Context, ev report.Evidence) report.Result {
	start := iv.o.Clock.Now()
	rc := iv.o.Report
	r := &run{iv: iv, ev: ev, price: iv.cfg.Prices[rc.Model], summarised: map[[2]int]bool{},
		rec: &report.Investigation{ID: iv.o.NewID(), Parent: ev.TaskID}}
	r.msgs = []report.Message{{Role: report.RoleUser, Text: BuildPrompt(ev, rc.Input, iv.o.Tools, iv.cfg)}}
	res := report.Result{Model: rc.Model, Provider: iv.o.Provider.Name(), Investigation: r.rec}
	loopCtx, cancel := context.WithTimeout(ctx, iv.cfg.WallTime)
	defer cancel()
	for step := 1; ; step++ {
		if end := r.budgetEnded(loopCtx, step); end != "" {
			r.rec.EndedBy = end
			break
		}
		resp, err := r.turn(loopCtx, step, iv.specs)
		if err != nil {
			if loopCtx.Err() != nil && ctx.Err() == nil {
				r.rec.EndedBy = endedWallTime
				break
			}
			r.rec.EndedBy = endedError
			return r.finish(res, start, report.Response{}, err)
		}
		if len(resp.ToolCalls) == 0 {
			r.rec.EndedBy = endedAnswer
			return r.finish(res, start, resp, nil)
		}
		r.msgs = append(r.msgs, report.Message{Role: report.RoleAssistant, Text: resp.Text, ToolCalls: resp.ToolCalls})
		r.msgs = append(r.msgs, report.Message{Role: report.RoleUser, ToolResults: r.calls(loopCtx, step, resp.ToolCalls)})
	}
	// One last turn without tools, on its own bound: report.timeout.
	finalCtx, cancelFinal := context.WithTimeout(ctx, rc.Timeout)
	defer cancelFinal()
	r.msgs = flatten(append(r.msgs, report.Message{Role: report.RoleUser, Text: finalTurnText(r.rec.EndedBy)}))
	resp, err := r.turn(finalCtx, len(r.rec.Steps)+1, nil)
	return r.finish(res, start, resp, err)
}

// budgetEnded names the budget that ends the tool loop before step, ""
// while none has.
func (r *run) budgetEnded(ctx context.Context, step int) string {
	switch {
	case step > r.iv.cfg.MaxSteps:
		return endedMaxSteps
	case r.rec.InputTokens+r.rec.OutputTokens >= r.iv.cfg.MaxTokens:
		return endedMaxTokens
	case ctx.Err() != nil:
		return endedWallTime
	}
	if b := r.iv.o.Budget; b != nil {
		if ok, err := b.Left(ctx); err != nil || !ok {
			// Closed: when the budget cannot be read, no more is spent.
			return endedDailyBudget
		}
	}
	return ""
}

// turn is one model call; its tokens and cost are counted in the record,
// the daily budget and the metrics.
func (r *run) turn(ctx context.Context, step int, tools []report.Tool) (report.Response, error) {
	rc := r.iv.o.Report
	r.fitContext()
	req := report.Request{Model: rc.Model, System: SystemPrompt, Messages: r.msgs, Tools: tools,
		Temperature: rc.Temperature, MaxTokens: rc.MaxTokens, MaxAnswerBytes: rc.AnswerCap()}
	t0 := r.iv.o.Clock.Now()
	cctx, span := report.StartChat(ctx, r.iv.o.Provider.Name(), req)
	resp, err := r.iv.o.Provider.Complete(cctx, req)
	report.EndChat(span, resp, err)
	st := report.Step{N: step, InputTokens: resp.InputTokens, OutputTokens: resp.OutputTokens,
		LatencyS: r.iv.o.Clock.Now().Sub(t0).Seconds()}
	r.rec.Steps = append(r.rec.Steps, st)
	r.rec.InputTokens += resp.InputTokens
	r.rec.OutputTokens += resp.OutputTokens
	cost := r.price.Cost(resp.InputTokens, resp.OutputTokens)
	r.rec.CostUSD += cost
	if b := r.iv.o.Budget; b != nil && resp.InputTokens+resp.OutputTokens > 0 {
		// Counted on a context of its own: a spent turn is counted even
		// when the loop's time ran out.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = b.Spend(bctx, int64(resp.InputTokens+resp.OutputTokens), cost)
		cancel()
	}
	r.iv.o.Metrics.turn(r.iv.o.Provider.Name(), rc.Model, resp.InputTokens, resp.OutputTokens, cost)
	return resp, err
}

// calls judges and runs the tool calls of one step, in order, and
// answers each.
func (r *run) calls(ctx context.Context, step int, calls []report.ToolCall) []report.ToolResult {
	out := make([]report.ToolResult, 0, len(calls))
	st := &r.rec.Steps[len(r.rec.Steps)-1]
	for i, tc := range calls {
		tctx, span := startTool(ctx, tc.ID)
		c, text := r.call(tctx, step, i, tc)
		endTool(span, c)
		r.redactCall(&c)
		st.Calls = append(st.Calls, c)
		r.iv.o.Metrics.call(c.Result)
		if c.Result != ResultRan {
			r.rec.Gaps = append(r.rec.Gaps, report.Gap{Tool: c.Tool, Host: c.Host, Result: c.Result, Reason: c.Reason})
			text = fmt.Sprintf("refused: %s: %s", c.Result, c.Reason)
		}
		out = append(out, report.ToolResult{CallID: tc.ID, Text: text, IsError: c.Result != ResultRan})
	}
	return out
}

// call is one tool call judged, and run as a task when it passes; text is
// what the model is answered when it ran.
func (r *run) call(ctx context.Context, step, i int, tc report.ToolCall) (report.Call, string) {
	c := report.Call{Tool: cut(tc.Name, 64)}
	args, argErr := arguments(tc.Input)
	if argErr == nil {
		c.Host = cut(args["host"], 255)
		delete(args, "host")
		if c.Host == "" {
			c.Host = r.ev.Host
		}
		c.Params = args
	}
	tool, ok := r.iv.tools[tc.Name]
	if !ok {
		c.Result, c.Reason = ResultNotOffered, fmt.Sprintf("%q is not a diagnostic offered to investigations", c.Tool)
		return c, ""
	}
	if argErr != nil {
		c.Result, c.Reason = ResultBadArguments, argErr.Error()
		return c, ""
	}
	if i >= r.iv.cfg.CallsPerStep {
		c.Result, c.Reason = ResultTooManyCalls, fmt.Sprintf("at most %d calls a step (report.investigate.calls_per_step)", r.iv.cfg.CallsPerStep)
		return c, ""
	}
	if !r.inScope(c.Host) {
		c.Result, c.Reason = ResultOutOfScope, fmt.Sprintf("host %q is outside the investigation's scope (the alert's host %q)", cut(c.Host, 255), r.ev.Host)
		return c, ""
	}
	for k := range args {
		if _, ok := tool.Params[k]; !ok {
			c.Result, c.Reason = ResultBadArguments, fmt.Sprintf("unknown param %q of %s", cut(k, 64), tool.Name)
			return c, ""
		}
	}
	if ctx.Err() != nil {
		c.Result, c.Reason = ResultBudgetSpent, fmt.Sprintf("wall time %gs spent (report.investigate.wall_time)", r.iv.cfg.WallTime.Seconds())
		return c, ""
	}
	spec := TaskSpec{ID: fmt.Sprintf("%s-s%d-c%d", r.rec.ID, step, i+1), Host: c.Host, Diagnostic: tool.Name,
		Params: args, Origin: Origin, Parent: r.ev.TaskID, Investigation: r.rec.ID, Step: step}
	c.TaskID = spec.ID
	rec, err := r.iv.o.Tasks.Submit(ctx, spec)
	if err != nil {
		c.Result, c.Reason = ResultError, err.Error()
		return c, ""
	}
	c.Outcome = rec.Outcome
	if !outcome.Ran(rec.Outcome) {
		c.Result, c.Reason = rec.Outcome, rec.Reason
		return c, ""
	}
	c.Result = ResultRan
	c.RanOn = rec.RanOn
	return c, toolText(rec, r.iv.o.Report.Input)
}

// inScope: the alert's host, or one matching investigate.hosts that the
// agent's allow-list accepts.
func (r *run) inScope(host string) bool {
	if host == r.ev.Host {
		return true
	}
	return r.iv.hosts != nil && r.iv.o.AllowHost != nil && r.iv.hosts.MatchString(host) && r.iv.o.AllowHost(host)
}

// arguments reads a tool input: a JSON object of strings.
func arguments(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 {
		return map[string]string{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("the input is not a JSON object")
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("param %q is not a string", cut(k, 64))
		}
		out[k] = s
	}
	return out, nil
}

func cut(s string, n int) string { return utf8cut.Head(s, n) }

// toolText is a task's record as the model reads it: the head and tail of
// its redacted output within input.max_bytes.
func toolText(rec TaskRecord, in report.Input) string {
	var b strings.Builder
	exit := "none"
	if rec.ExitCode != nil {
		exit = fmt.Sprint(*rec.ExitCode)
	}
	fmt.Fprintf(&b, "task %s: outcome %s, exit code %s", rec.ID, rec.Outcome, exit)
	// The model attributes what the output shows to the machine that
	// produced it, which it is told rather than left to assume.
	if rec.RanOn != nil {
		fmt.Fprintf(&b, ", ran on %s", rec.RanOn)
	}
	b.WriteString("\n")
	out := HeadTail(rec.Output, int(in.MaxBytes))
	if out == "" {
		b.WriteString("(no output)\n")
		return b.String()
	}
	fence := report.Fence(out)
	b.WriteString(fence + "\n" + out)
	if !strings.HasSuffix(out, "\n") {
		b.WriteString("\n")
	}
	b.WriteString(fence + "\n")
	return b.String()
}

// HeadTail is s within n bytes: its head and tail around a mark saying how
// much was left out.
func HeadTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	mark := fmt.Sprintf("\n[... %d bytes left out ...]\n", len(s)-n)
	half := max((n-len(mark))/2, 0)
	return utf8cut.Head(s, half) + mark + utf8cut.Tail(s, half)
}

// fitContext keeps the conversation under context_bytes: the oldest tool
// results are cut to their first lines first.
func (r *run) fitContext() {
	limit := int(r.iv.cfg.ContextBytes)
	size := func() int {
		n := len(SystemPrompt)
		for _, m := range r.msgs {
			n += len(m.Text)
			for _, c := range m.ToolCalls {
				n += len(c.Input) + len(c.Name)
			}
			for _, t := range m.ToolResults {
				n += len(t.Text)
			}
		}
		return n
	}
	for i := range r.msgs {
		for j := range r.msgs[i].ToolResults {
			if size() <= limit {
				return
			}
			if r.summarised[[2]int{i, j}] {
				continue
			}
			r.summarised[[2]int{i, j}] = true
			// A copy: requests already sent keep what they sent.
			r.msgs[i].ToolResults = slices.Clone(r.msgs[i].ToolResults)
			t := &r.msgs[i].ToolResults[j]
			t.Text = firstLines(t.Text, 3) + "[summarised: the rest of this result was left out to stay within the context budget]\n"
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitAfterN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return utf8cut.Head(strings.Join(lines, ""), 512)
}

// flatten turns tool calls and results into text, so that the last turn
// can be sent without tools to either provider.
func flatten(ms []report.Message) []report.Message {
	var out []report.Message
	add := func(role, text string) {
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Text += "\n\n" + text
			return
		}
		out = append(out, report.Message{Role: role, Text: text})
	}
	for _, m := range ms {
		var b strings.Builder
		b.WriteString(m.Text)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "\n[called %s %s (call %s)]", c.Name, c.Input, c.ID)
		}
		for _, t := range m.ToolResults {
			fmt.Fprintf(&b, "\n[result of call %s]\n%s", t.CallID, t.Text)
		}
		add(m.Role, strings.TrimSpace(b.String()))
	}
	return out
}

// finish makes the Result: the answer redacted and cut, the Gaps section
// added from the record, and the cited task ids kept as Evidence.
func (r *run) finish(res report.Result, start time.Time, resp report.Response, err error) report.Result {
	rc := r.iv.o.Report
	res.CreatedAt = r.iv.o.Clock.Now().UTC()
	res.LatencyS = res.CreatedAt.Sub(start).Seconds()
	res.InputTokens, res.OutputTokens = r.rec.InputTokens, r.rec.OutputTokens
	res.FinishReason, res.Truncated = resp.FinishReason, resp.Truncated
	res.Attempts = len(r.rec.Steps)
	defer func() { r.iv.o.Metrics.end(r.rec.EndedBy, res.Status, len(r.rec.Steps)) }()
	if err != nil {
		res.Status = report.StatusFailed
		res.Reason = fmt.Sprintf("investigation %s: %v", r.rec.ID, err)
		if errors.Is(err, report.ErrAnswerTooLarge) {
			res.Reason = fmt.Sprintf("%s: investigation %s: %v", report.ErrAnswerTooLarge, r.rec.ID, err)
		}
		return res
	}
	md := strings.TrimRight(resp.Text, "\n") + "\n" + gapsSection(r.rec.Gaps)
	if r.iv.o.Redactor != nil {
		md = r.iv.o.Redactor.RedactString(md)
	}
	r.rec.Evidence = r.cited(md)
	if c, ok := report.CutAnswer(md, rc.AnswerCap()); ok {
		md, res.AnswerCut = c, true
	}
	res.Markdown = md
	res.Confidence = report.ParseConfidence(md)
	res.Status = report.StatusOK
	if resp.Truncated {
		res.Status = report.StatusFailed
		res.Reason = fmt.Sprintf("answer cut at max_tokens (%d; finish reason %q)", rc.MaxTokens, resp.FinishReason)
	}
	return res
}

// cited are the task ids of this investigation (and its parent) that md
// names, in the order of the record.
func (r *run) cited(md string) []string {
	var out []string
	ids := []string{r.ev.TaskID}
	for _, s := range r.rec.Steps {
		for _, c := range s.Calls {
			if c.Result == ResultRan {
				ids = append(ids, c.TaskID)
			}
		}
	}
	for _, id := range ids {
		if id != "" && strings.Contains(md, id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// gapsSection lists what could not be checked; every report of an
// investigation has it.
func gapsSection(gaps []report.Gap) string {
	var b strings.Builder
	b.WriteString("\n## Gaps\n")
	if len(gaps) == 0 {
		b.WriteString("None: every diagnostic asked for ran.\n")
		return b.String()
	}
	for _, g := range gaps {
		fmt.Fprintf(&b, "- could not check `%s`", g.Tool)
		if g.Host != "" {
			fmt.Fprintf(&b, " on %s", g.Host)
		}
		fmt.Fprintf(&b, ": %s", g.Result)
		if g.Reason != "" {
			fmt.Fprintf(&b, " (%s)", strings.ReplaceAll(g.Reason, "\n", " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// redactCall redacts what the model chose of a call, ran or refused (a
// pattern that lets a param through says nothing of secrets): it is
// stored, logged and sent to sinks.
func (r *run) redactCall(c *report.Call) {
	red := r.iv.o.Redactor
	if red == nil {
		return
	}
	c.Tool, c.Host, c.Reason = red.RedactString(c.Tool), red.RedactString(c.Host), red.RedactString(c.Reason)
	for k, v := range c.Params {
		c.Params[k] = red.RedactString(cut(v, 1024))
	}
}
