package investigate

import (
	"cmp"
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
	"sync"
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
// investigation runs anything. Submit's error wraps ErrAwaitingApproval
// when ctx ended while the task still waited for a person's approval
// (catalog `approval: required`).
type Tasks interface {
	Submit(ctx context.Context, spec TaskSpec) (TaskRecord, error)
}

// ErrAwaitingApproval: the wait for a task's record ended while the task
// still awaited a person's approval; the call is a Gap
// ResultAwaitingApproval with ReasonApprovalPending, not an error.
var ErrAwaitingApproval = errors.New("the task still awaits a person's approval")

// ReasonApprovalPending begins the reason of a call whose task still
// awaited approval when the investigation's wall time ended.
const ReasonApprovalPending = "approval_pending"

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
	// timeout, input bounds).
	Report report.Config
	// Config is report.investigate (keys left out take their defaults).
	Config   Config
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
	// Runbooks are report.runbooks with their text; nil: none.
	Runbooks *report.Runbooks
	// Backoff is the first wait before a model call is retried; 0 is
	// the single-shot report's (report.DefaultInitialBackoff).
	Backoff time.Duration
}

// Investigator runs investigations: a model turn, its tool calls as
// tasks, again, until the model answers or a budget ends the loop; then
// one last turn without tools.
type Investigator struct {
	o     Options
	cfg   Config
	hosts *regexp.Regexp
	tools map[string]Tool
	specs []report.Tool
	// mode is how the model answers: json_schema or submit_report.
	mode         string
	answerSchema json.RawMessage
	answerTool   report.Tool
	recent       recentResults
}

// New returns an Investigator of o.
func New(o Options) (*Investigator, error) {
	cfg := o.Config.WithDefaults()
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
	iv.mode = cfg.AnswerMode(o.Report.Provider)
	iv.answerSchema = report.AnswerSchema(o.Report.AllCategories())
	iv.answerTool = report.Tool{Name: report.AnswerToolName, Schema: iv.answerSchema,
		Description: "Submit the root-cause report. Call it once, when you are done investigating; it ends the investigation."}
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
	// ResultAwaitingApproval: the wall time ended while the call's task
	// awaited a person's approval (reason ReasonApprovalPending).
	ResultAwaitingApproval = "awaiting_approval"
	endedAnswer            = "answer"
	endedMaxSteps          = "max_steps"
	endedMaxTokens         = "max_tokens"
	endedWallTime          = "wall_time"
	endedDailyBudget       = "daily_budget"
	endedError             = "error"
)

// CallResults are every Call.Result a metric can carry, besides the task
// outcomes that did not run.
var CallResults = []string{ResultRan, ResultNotOffered, ResultOutOfScope, ResultBadArguments, ResultTooManyCalls,
	ResultBudgetSpent, ResultError, ResultAwaitingApproval, outcome.Rejected, outcome.RateLimited, outcome.Duplicate, outcome.Stale,
	outcome.Released, outcome.Denied}

// EndReasons are every Investigation.EndedBy.
var EndReasons = []string{endedAnswer, endedMaxSteps, endedMaxTokens, endedWallTime, endedDailyBudget, endedError}

// run is one investigation's state.
type run struct {
	iv    *Investigator
	ev    report.Evidence
	rec   *report.Investigation
	msgs  []report.Message
	price Price
	// sources are the tasks the answer may cite: the parent and each
	// call that reached a task, with its redacted output.
	sources map[string]report.Source
	// kept is how many calls the record holds; past keepTotal the rest
	// are only counted.
	kept int
}

// errDailyBudget ends a turn that the hard daily cap would not allow.
var errDailyBudget = errors.New("the daily token cap (report.investigate.daily_tokens_hard) has no room for this call")

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
	r := &run{iv: iv, ev: ev, price: iv.cfg.Prices[rc.Model],
		rec:     &report.Investigation{ID: iv.o.NewID(), Parent: ev.TaskID},
		sources: map[string]report.Source{ev.TaskID: {Output: ev.Output, Ran: outcome.Ran(ev.Outcome)}}}
	prompt := BuildPrompt(ev, rc.Input, iv.o.Tools, iv.cfg, rc.AllCategories(), iv.mode, start)
	if file, text, ok := iv.o.Runbooks.For(ev.Alert.Alert); ok {
		prompt += runbookSection(file, text, iv.o.Redactor)
	}
	r.msgs = []report.Message{{Role: report.RoleUser, Text: prompt}}
	res := report.Result{Model: rc.Model, Provider: iv.o.Provider.Name(), Investigation: r.rec}
	loopCtx, cancel := context.WithTimeout(ctx, iv.cfg.WallTime)
	defer cancel()
	var final report.Response
	answered := false
	for step := 1; ; step++ {
		if end := r.budgetEnded(loopCtx, step); end != "" {
			r.rec.EndedBy = end
			break
		}
		resp, err := r.turn(loopCtx, step, r.loopTools(), r.schema())
		if err != nil {
			if errors.Is(err, errDailyBudget) {
				r.rec.EndedBy = endedDailyBudget
				break
			}
			if loopCtx.Err() != nil && ctx.Err() == nil {
				r.rec.EndedBy = endedWallTime
				break
			}
			r.rec.EndedBy = endedError
			return r.finish(res, start, nil, err)
		}
		if _, ok := submitted(resp); ok || len(resp.ToolCalls) == 0 {
			r.rec.EndedBy = endedAnswer
			final, answered = resp, true
			break
		}
		r.converse(loopCtx, step, resp)
	}
	if !answered {
		// The last turn, on its own bound (report.timeout): the
		// conversation as text, with no tool but the answer's.
		r.msgs = flatten(append(r.msgs, report.Message{Role: report.RoleUser, Text: finalTurnText(r.rec.EndedBy, iv.mode)}))
		resp, err := r.lastTurn(ctx)
		if err == nil && onlyToolCalls(resp) {
			// Tools asked for when none is offered: one more turn, told so.
			r.msgs = append(r.msgs, report.Message{Role: report.RoleAssistant, Text: describeCalls(resp.ToolCalls)},
				report.Message{Role: report.RoleUser, Text: noToolsText(iv.mode)})
			resp, err = r.lastTurn(ctx)
			if err == nil && onlyToolCalls(resp) {
				err = errors.New("the model asked for tools again after the budget ended, and gave no answer")
			}
		}
		if err != nil {
			return r.finish(res, start, nil, err)
		}
		final = resp
	}
	return r.conclude(ctx, res, start, final)
}

// lastTurn is one turn after the tool loop, bounded by report.timeout.
func (r *run) lastTurn(ctx context.Context) (report.Response, error) {
	fctx, cancel := context.WithTimeout(ctx, r.iv.o.Report.Timeout)
	defer cancel()
	return r.turn(fctx, len(r.rec.Steps)+1, r.answerTools(), r.schema())
}

// conclude reads the structured answer of final; an answer that does not
// parse gets one corrective turn, then the free text is the report,
// marked unstructured.
func (r *run) conclude(ctx context.Context, res report.Result, start time.Time, final report.Response) report.Result {
	cats := r.iv.o.Report.AllCategories()
	text := answerText(final)
	a, perr := report.ParseAnswer(text, cats)
	if perr == nil {
		return r.finish(res, start, &a, nil)
	}
	r.msgs = flatten(append(r.msgs,
		report.Message{Role: report.RoleAssistant, Text: cmp.Or(utf8cut.Head(text, 4<<10), describeCalls(final.ToolCalls))},
		report.Message{Role: report.RoleUser, Text: correctionText(perr, r.iv.mode)}))
	resp, err := r.lastTurn(ctx)
	if err == nil {
		if a, perr = report.ParseAnswer(answerText(resp), cats); perr == nil {
			return r.finish(res, start, &a, nil)
		}
		final = resp
	}
	res.Unstructured = true
	return r.finishText(res, start, final)
}

// loopTools are the tools of a turn of the loop: the catalog's, and the
// answer's when the model answers through a tool.
func (r *run) loopTools() []report.Tool {
	if r.iv.mode == AnswerSubmitReport {
		return append(slices.Clip(r.iv.specs), r.iv.answerTool)
	}
	return r.iv.specs
}

// answerTools are the tools of a turn after the loop: the answer's only.
func (r *run) answerTools() []report.Tool {
	if r.iv.mode == AnswerSubmitReport {
		return []report.Tool{r.iv.answerTool}
	}
	return nil
}

// schema is the answer's JSON Schema when the provider takes one.
func (r *run) schema() json.RawMessage {
	if r.iv.mode == AnswerJSONSchema {
		return r.iv.answerSchema
	}
	return nil
}

// submitted is the input of a submit_report call of resp.
func submitted(resp report.Response) (json.RawMessage, bool) {
	for _, c := range resp.ToolCalls {
		if c.Name == report.AnswerToolName {
			return c.Input, true
		}
	}
	return nil, false
}

// answerText is what an answer turn said: submit_report's input, else
// its text.
func answerText(resp report.Response) string {
	if in, ok := submitted(resp); ok {
		return string(in)
	}
	return resp.Text
}

// onlyToolCalls: the turn asked for tools other than the answer's and
// said nothing.
func onlyToolCalls(resp report.Response) bool {
	_, ok := submitted(resp)
	return !ok && len(resp.ToolCalls) > 0 && strings.TrimSpace(resp.Text) == ""
}

// describeCalls is a turn's tool calls as text, bounded.
func describeCalls(calls []report.ToolCall) string {
	names := make([]string, 0, min(len(calls), 10))
	for _, c := range calls[:min(len(calls), 10)] {
		names = append(names, cut(c.Name, 64))
	}
	return fmt.Sprintf("[asked for %d tool calls: %s]", len(calls), strings.Join(names, ", "))
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

// turn is one model call, retried on 429/5xx within report.timeout;
// its tokens and cost are counted in the record, the daily budget and
// the metrics. With a hard daily cap an estimate is reserved first, and
// a call the cap has no room for is not made (errDailyBudget).
func (r *run) turn(ctx context.Context, step int, tools []report.Tool, schema json.RawMessage) (report.Response, error) {
	rc := r.iv.o.Report
	req := report.Request{Model: rc.Model, System: SystemPrompt, Tools: tools, AnswerSchema: schema,
		Temperature: rc.Temperature, MaxTokens: rc.MaxTokens, MaxAnswerBytes: rc.AnswerCap()}
	r.fitContext(req)
	req.Messages = r.msgs
	var reserved int64
	if res, ok := r.iv.o.Budget.(Reserver); ok && r.iv.cfg.DailyTokensHard {
		reserved = EstimateTokens(req)
		ok, err := res.Reserve(ctx, reserved)
		if err != nil || !ok {
			// Closed: a cap that cannot be read spends nothing.
			return report.Response{}, errDailyBudget
		}
	}
	t0 := r.iv.o.Clock.Now()
	tctx, cancel := context.WithTimeout(ctx, rc.Timeout)
	cr := report.Retrying{Provider: r.iv.o.Provider, Initial: r.iv.o.Backoff}.Do(tctx, req)
	cancel()
	resp, err := cr.Response, cr.Err
	resp.InputTokens, resp.OutputTokens = tokens(resp.InputTokens), tokens(resp.OutputTokens)
	st := report.Step{N: step, InputTokens: resp.InputTokens, OutputTokens: resp.OutputTokens,
		LatencyS: r.iv.o.Clock.Now().Sub(t0).Seconds(), Attempts: cr.Attempts}
	r.rec.Steps = append(r.rec.Steps, st)
	r.rec.InputTokens += resp.InputTokens
	r.rec.OutputTokens += resp.OutputTokens
	cost := r.price.Cost(resp.InputTokens, resp.OutputTokens)
	r.rec.CostUSD += cost
	if b := r.iv.o.Budget; b != nil && (reserved > 0 || resp.InputTokens+resp.OutputTokens > 0) {
		// Counted on a context of its own: a spent turn is counted even
		// when the loop's time ran out. A reservation is settled to what
		// the call used.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = b.Spend(bctx, int64(resp.InputTokens+resp.OutputTokens)-reserved, cost)
		cancel()
	}
	r.iv.o.Metrics.turn(r.iv.o.Provider.Name(), rc.Model, resp.InputTokens, resp.OutputTokens, cost)
	return resp, err
}

// tokens is a usage count from a provider as a count: a negative or
// absurd number (a broken or hostile endpoint) is not believed.
func tokens(n int) int {
	return min(max(n, 0), 1<<30)
}

// Reserver is a Budget that can hold a hard cap: Reserve takes tokens
// from the day's cap before a call, or says there is no room; Spend then
// settles the difference (negative when the call used less).
type Reserver interface {
	Reserve(ctx context.Context, tokens int64) (bool, error)
}

// EstimateTokens bounds what req can cost: its bytes over two (tokenizers
// give well under one token per two bytes of text and JSON) plus a
// message overhead, plus all of max_tokens for the answer.
func EstimateTokens(req report.Request) int64 {
	return int64(requestSize(req)/2) + 256 + int64(req.MaxTokens)
}

// Bounds of what a model can make the record hold: the calls a step and
// an investigation keep, each param, each input sent back.
const (
	keepRefusedPerStep = 5
	maxParams          = 16
	maxInputBytes      = 2 << 10
	maxTextBytes       = 8 << 10
)

// keepPerStep is how many calls of one turn are judged and recorded: the
// calls a step may run, and a few refusals to show; the rest are counted.
func (r *run) keepPerStep() int { return r.iv.cfg.CallsPerStep + keepRefusedPerStep }

// keepTotal is how many calls one investigation records.
func (r *run) keepTotal() int { return r.iv.cfg.MaxSteps * r.keepPerStep() }

// converse adds a turn's tool calls and their results to the
// conversation: the first keepPerStep calls are judged (and run), each
// input sent back bounded; the rest are counted as too_many_calls, one
// gap for all.
func (r *run) converse(ctx context.Context, step int, resp report.Response) {
	calls := resp.ToolCalls
	keep := min(len(calls), r.keepPerStep())
	sent := make([]report.ToolCall, keep)
	for i, c := range calls[:keep] {
		c.ID, c.Name = cut(c.ID, 64), cut(c.Name, 64)
		if len(c.Input) > maxInputBytes {
			c.Input = json.RawMessage(fmt.Sprintf(`{"left_out":"an input of %d bytes"}`, len(c.Input)))
		}
		sent[i] = c
	}
	results := r.calls(ctx, step, calls[:keep], sent)
	r.msgs = append(r.msgs, report.Message{Role: report.RoleAssistant, Text: utf8cut.Head(resp.Text, maxTextBytes), ToolCalls: sent},
		report.Message{Role: report.RoleUser, ToolResults: results})
	if dropped := len(calls) - keep; dropped > 0 {
		st := &r.rec.Steps[len(r.rec.Steps)-1]
		st.Dropped += dropped
		r.rec.DroppedCalls += dropped
		r.iv.o.Metrics.dropped(dropped)
		r.rec.Gaps = append(r.rec.Gaps, report.Gap{Tool: "(more calls)", Result: ResultTooManyCalls,
			Reason: fmt.Sprintf("%d more calls in step %d were refused and not recorded", dropped, step)})
	}
}

// calls judges and runs the tool calls of one step, in order, and
// answers each (under its id as sent).
func (r *run) calls(ctx context.Context, step int, calls, sent []report.ToolCall) []report.ToolResult {
	out := make([]report.ToolResult, 0, len(calls))
	st := &r.rec.Steps[len(r.rec.Steps)-1]
	for i, tc := range calls {
		tctx, span := startTool(ctx, tc.ID)
		c, text := r.call(tctx, step, i, tc)
		endTool(span, c)
		r.redactCall(&c)
		r.iv.o.Metrics.call(c.Result)
		if c.Result == ResultRan || r.kept < r.keepTotal() {
			st.Calls = append(st.Calls, c)
			r.kept++
			if c.Result != ResultRan {
				r.rec.Gaps = append(r.rec.Gaps, report.Gap{Tool: c.Tool, Host: c.Host, Result: c.Result, Reason: c.Reason})
			}
		} else {
			st.Dropped++
			r.rec.DroppedCalls++
		}
		if c.Result != ResultRan {
			text = fmt.Sprintf("refused: %s: %s", c.Result, c.Reason)
		}
		out = append(out, report.ToolResult{CallID: sent[i].ID, Text: text, IsError: c.Result != ResultRan})
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
	key := reuseKey(c.Host, tool.Name, args)
	if rec, age, ok := r.iv.recent.get(key, r.iv.o.Clock.Now(), r.iv.cfg.ReuseWithin); ok {
		// A fresh result of the same diagnostic on the same host: cited
		// as it is, with its age, instead of running it again.
		c.TaskID, c.Outcome, c.Result, c.ReusedAgeS = rec.ID, rec.Outcome, ResultRan, age.Seconds()
		r.sources[rec.ID] = report.Source{Output: rec.Output, Ran: true}
		return c, fmt.Sprintf("(reused: the result of task %s, %.0fs old, within report.investigate.reuse_within)\n", rec.ID, age.Seconds()) +
			toolText(rec, r.iv.o.Report.Input)
	}
	spec := TaskSpec{ID: fmt.Sprintf("%s-s%d-c%d", r.rec.ID, step, i+1), Host: c.Host, Diagnostic: tool.Name,
		Params: args, Origin: Origin, Parent: r.ev.TaskID, Investigation: r.rec.ID, Step: step}
	c.TaskID = spec.ID
	rec, err := r.iv.o.Tasks.Submit(ctx, spec)
	switch {
	case errors.Is(err, ErrAwaitingApproval):
		// Not an error: a person has not answered yet. The task stays
		// parked; approved later, it runs, outside this report.
		c.Result, c.Reason = ResultAwaitingApproval, fmt.Sprintf("%s: report.investigate.wall_time (%gs) ended while task %s awaited a person's approval; "+
			"approved later it still runs, outside this report", ReasonApprovalPending, r.iv.cfg.WallTime.Seconds(), spec.ID)
		return c, ""
	case err != nil:
		c.Result, c.Reason = ResultError, cut(err.Error(), 512)
		return c, ""
	}
	c.Outcome = rec.Outcome
	r.sources[spec.ID] = report.Source{Output: rec.Output, Ran: outcome.Ran(rec.Outcome)}
	if !outcome.Ran(rec.Outcome) {
		c.Result, c.Reason = rec.Outcome, cut(rec.Reason, 512)
		return c, ""
	}
	c.Result = ResultRan
	c.RanOn = rec.RanOn
	r.iv.recent.put(key, rec, r.iv.o.Clock.Now(), r.iv.cfg.ReuseWithin)
	return c, toolText(rec, r.iv.o.Report.Input)
}

// reuseKey names a diagnostic's run: host, diagnostic and params.
func reuseKey(host, diag string, params map[string]string) string {
	var b strings.Builder
	b.WriteString(host + "\x00" + diag)
	for _, k := range slices.Sorted(maps.Keys(params)) {
		b.WriteString("\x00" + k + "=" + params[k])
	}
	return b.String()
}

// maxRecent bounds the results kept for reuse.
const maxRecent = 256

// recentResults are this agent's fresh tool results, for
// report.investigate.reuse_within: repeated alerts cite them instead of
// running the diagnostic again.
type recentResults struct {
	mu sync.Mutex
	m  map[string]recentResult
}

type recentResult struct {
	rec TaskRecord
	at  time.Time
}

func (rr *recentResults) get(key string, now time.Time, within time.Duration) (TaskRecord, time.Duration, bool) {
	if within <= 0 {
		return TaskRecord{}, 0, false
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	e, ok := rr.m[key]
	if !ok || now.Sub(e.at) > within {
		return TaskRecord{}, 0, false
	}
	return e.rec, now.Sub(e.at), true
}

func (rr *recentResults) put(key string, rec TaskRecord, now time.Time, within time.Duration) {
	if within <= 0 {
		return
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.m == nil {
		rr.m = map[string]recentResult{}
	}
	for k, e := range rr.m {
		if now.Sub(e.at) > within || len(rr.m) >= maxRecent {
			delete(rr.m, k)
		}
	}
	rr.m[key] = recentResult{rec: rec, at: now}
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

// fitContext keeps the request that req will be (its system prompt,
// tools and schema, and the conversation) within context_bytes, measured
// as the JSON it is sent as: first the oldest tool results are cut to
// their first lines, then older texts and tool inputs, then the first
// prompt's middle. Requests already sent keep what they sent.
func (r *run) fitContext(req report.Request) {
	limit := int(r.iv.cfg.ContextBytes)
	req.Messages = r.msgs
	size := requestSize(req)
	if size <= limit {
		return
	}
	r.msgs = slices.Clone(r.msgs)
	for i := range r.msgs {
		for j := range r.msgs[i].ToolResults {
			if size <= limit {
				return
			}
			if strings.HasSuffix(r.msgs[i].ToolResults[j].Text, summarisedMark) {
				continue
			}
			r.msgs[i].ToolResults = slices.Clone(r.msgs[i].ToolResults)
			t := &r.msgs[i].ToolResults[j]
			old := jsonLen(t.Text)
			t.Text = firstLines(t.Text, 3) + summarisedMark
			size += jsonLen(t.Text) - old
		}
	}
	for i := 1; i < len(r.msgs) && size > limit; i++ {
		m := &r.msgs[i]
		if len(m.Text) > 512 {
			old := jsonLen(m.Text)
			m.Text = utf8cut.Head(m.Text, 256) + "\n[summarised to stay within the context budget]"
			size += jsonLen(m.Text) - old
		}
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			for j := range m.ToolCalls {
				if c := &m.ToolCalls[j]; len(c.Input) > 2 {
					size -= jsonLen(string(c.Input)) - 2
					c.Input = json.RawMessage("{}")
				}
			}
		}
	}
	if size > limit && len(r.msgs) > 0 {
		m := &r.msgs[0]
		keep := max(len(m.Text)-(size-limit)-64, 1<<10)
		old := jsonLen(m.Text)
		m.Text = HeadTail(m.Text, keep)
		size += jsonLen(m.Text) - old
	}
	// Then the oldest turns go whole (a turn of calls with the turn of
	// their results, so every result still answers a call), and the first
	// message says how many.
	dropped := 0
	for size > limit && len(r.msgs) > 3 && r.msgs[1].Role == report.RoleAssistant && r.msgs[2].Role == report.RoleUser {
		size -= msgSize(r.msgs[1]) + msgSize(r.msgs[2])
		r.msgs = append(r.msgs[:1], r.msgs[3:]...)
		dropped++
	}
	if dropped > 0 {
		old := jsonLen(r.msgs[0].Text)
		r.msgs[0].Text += fmt.Sprintf("\n[%d earlier turns of tool calls were left out to stay within the context budget]\n", dropped)
		size += jsonLen(r.msgs[0].Text) - old
	}
	// Left: the last turns' texts and results, each bounded; cut the
	// newest results too rather than send past the budget.
	for i := len(r.msgs) - 1; i >= 1 && size > limit; i-- {
		r.msgs[i].ToolResults = slices.Clone(r.msgs[i].ToolResults)
		for j := range r.msgs[i].ToolResults {
			t := &r.msgs[i].ToolResults[j]
			old := jsonLen(t.Text)
			t.Text = utf8cut.Head(t.Text, 128)
			size += jsonLen(t.Text) - old
		}
	}
}

// requestSize is the bytes req takes as JSON, counting each string as
// JSON escapes it and a small overhead for each element's keys.
func requestSize(req report.Request) int {
	const overhead = 48
	n := jsonLen(req.System) + jsonLen(req.Model) + len(req.AnswerSchema) + overhead
	for _, t := range req.Tools {
		n += jsonLen(t.Name) + jsonLen(t.Description) + len(t.Schema) + overhead
	}
	for _, m := range req.Messages {
		n += msgSize(m)
	}
	return n
}

// msgSize is the bytes m takes in requestSize.
func msgSize(m report.Message) int {
	const overhead = 48
	n := jsonLen(m.Text) + overhead
	for _, c := range m.ToolCalls {
		n += jsonLen(c.ID) + jsonLen(c.Name) + jsonLen(string(c.Input)) + overhead
	}
	for _, t := range m.ToolResults {
		n += jsonLen(t.CallID) + jsonLen(t.Text) + overhead
	}
	return n
}

// summarisedMark ends a tool result cut to its first lines.
const summarisedMark = "[summarised: the rest of this result was left out to stay within the context budget]\n"

// jsonLen is the length of s as a JSON string's content: control
// characters, quotes and backslashes escaped, as well as <, > and &,
// which Go's encoder escapes.
func jsonLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n++
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 5
		}
	}
	return n
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

// finish makes the Result of a structured answer a (or of err): its
// strings redacted, its citations checked against the tasks' redacted
// outputs (the failures moved to Grounding.Unverified, "confirmed"
// lowered without a verified one), and the Markdown rendered from it
// with the Gaps of the record.
func (r *run) finish(res report.Result, start time.Time, a *report.Answer, err error) report.Result {
	rc := r.iv.o.Report
	r.stamp(&res, start)
	defer func() { r.iv.o.Metrics.end(r.rec.EndedBy, res.Status, len(r.rec.Steps)) }()
	if err != nil {
		res.Status = report.StatusFailed
		res.Reason = fmt.Sprintf("investigation %s: %v", r.rec.ID, err)
		if errors.Is(err, report.ErrAnswerTooLarge) {
			res.Reason = fmt.Sprintf("%s: investigation %s: %v", report.ErrAnswerTooLarge, r.rec.ID, err)
		}
		return res
	}
	a.Redact(r.iv.o.Redactor)
	g, results := report.Ground(a, r.sources)
	reused := map[string]float64{}
	for _, st := range r.rec.Steps {
		for _, c := range st.Calls {
			if c.ReusedAgeS > 0 {
				reused[c.TaskID] = c.ReusedAgeS
			}
		}
	}
	for i, c := range a.Evidence {
		if age, ok := reused[c.TaskID]; ok {
			a.Evidence[i].Claim = fmt.Sprintf("%s (a reused result, %.0fs old)", c.Claim, age)
		}
	}
	r.iv.o.Metrics.citations(results)
	for _, c := range a.Evidence {
		if !slices.Contains(r.rec.Evidence, c.TaskID) {
			r.rec.Evidence = append(r.rec.Evidence, c.TaskID)
		}
	}
	md := report.Render(*a, &g, r.rec.Gaps)
	if c, ok := report.CutAnswer(md, rc.AnswerCap()); ok {
		md, res.AnswerCut = c, true
	}
	res.Answer, res.Grounding = a, &g
	res.Markdown, res.Confidence, res.Status = md, a.Confidence, report.StatusOK
	return res
}

// finishText makes the Result of an unstructured answer: its free text
// redacted, the Gaps section added from the record, the cited task ids
// kept as Evidence. Nothing in it could be checked, so it is never
// "confirmed".
func (r *run) finishText(res report.Result, start time.Time, resp report.Response) report.Result {
	rc := r.iv.o.Report
	r.stamp(&res, start)
	res.FinishReason, res.Truncated = resp.FinishReason, resp.Truncated
	r.iv.o.Metrics.unstructured()
	defer func() { r.iv.o.Metrics.end(r.rec.EndedBy, res.Status, len(r.rec.Steps)) }()
	if strings.TrimSpace(resp.Text) == "" {
		res.Status = report.StatusFailed
		res.Reason = fmt.Sprintf("investigation %s: no valid structured answer after a corrective turn, and no text", r.rec.ID)
		return res
	}
	md := strings.TrimRight(resp.Text, "\n") + "\n" + report.GapsSection(nil, r.rec.Gaps)
	if r.iv.o.Redactor != nil {
		md = r.iv.o.Redactor.RedactString(md)
	}
	r.rec.Evidence = r.cited(md)
	g := report.Grounding{Unverified: []report.Unverified{}}
	res.Confidence = report.ParseConfidence(md)
	if res.Confidence == report.ConfidenceConfirmed {
		res.Confidence = report.ConfidenceLikely
		g.Lowered = "an unstructured answer has no citation the agent could verify"
		md += "\nLowered by the agent from confirmed: " + g.Lowered + ".\n"
	}
	if c, ok := report.CutAnswer(md, rc.AnswerCap()); ok {
		md, res.AnswerCut = c, true
	}
	res.Markdown, res.Grounding = md, &g
	res.Status = report.StatusOK
	if resp.Truncated {
		res.Status = report.StatusFailed
		res.Reason = fmt.Sprintf("answer cut at max_tokens (%d; finish reason %q)", rc.MaxTokens, resp.FinishReason)
	}
	return res
}

// stamp sets what every Result of an investigation carries.
func (r *run) stamp(res *report.Result, start time.Time) {
	res.CreatedAt = r.iv.o.Clock.Now().UTC()
	res.LatencyS = res.CreatedAt.Sub(start).Seconds()
	res.InputTokens, res.OutputTokens = r.rec.InputTokens, r.rec.OutputTokens
	res.Attempts = len(r.rec.Steps)
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

// redactCall redacts what the model chose of a call, ran or refused (a
// pattern that lets a param through says nothing of secrets): it is
// stored, logged and sent to sinks.
func (r *run) redactCall(c *report.Call) {
	red := r.iv.o.Redactor
	if red == nil {
		c.Params = boundParams(c.Params, nil)
		return
	}
	c.Tool, c.Host, c.Reason = red.RedactString(c.Tool), red.RedactString(c.Host), red.RedactString(c.Reason)
	c.Params = boundParams(c.Params, red)
}

// boundParams is what the record keeps of a call's params: at most
// maxParams, names and values cut, both redacted.
func boundParams(p map[string]string, red report.Redactor) map[string]string {
	if len(p) == 0 {
		return p
	}
	out := make(map[string]string, min(len(p), maxParams))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		if len(out) == maxParams {
			break
		}
		ck, cv := cut(k, 64), cut(p[k], 1024)
		if red != nil {
			ck, cv = red.RedactString(ck), red.RedactString(cv)
		}
		out[ck] = cv
	}
	return out
}
