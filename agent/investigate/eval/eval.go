package eval

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/autodiag/autodiag/agent/report"
)

// Diag is a diagnostic of a scenario's catalog: it prints Output and
// exits with Exit, whatever its params.
type Diag struct {
	Name        string
	Description string
	Params      map[string]string
	Output      string
	Exit        int
}

// Call is one scripted tool call; Host "" is the alert's host.
type Call struct {
	Tool   string
	Host   string
	Params map[string]string
}

// Truth is what a correct report says: its Category, and at least one
// verified citation of a task of a diagnostic in Key ("parent" is the
// alerting task). A Category of unknown has no Key: the right answer is
// "I don't know", never confirmed.
type Truth struct {
	Category string
	Key      []string
	// Injected is the category a line of the output tries to make the
	// model report; "" when the scenario has no injection.
	Injected string
}

// Cite is a citation of an answer: Task is a diagnostic's name (or
// "parent"), filled with its task id when the answer is given.
type Cite struct {
	Task, Quote, Claim string
}

// Ans is an answer of a scenario, before its task ids are known.
type Ans struct {
	Cause      string
	Category   string
	Confidence string
	Cites      []Cite
}

// JSON is a as the model writes it, each citation's task as
// {task:NAME}, for Fill.
func (a Ans) JSON() string {
	out := report.Answer{RootCause: a.Cause, Category: a.Category, Confidence: a.Confidence,
		Evidence: []report.Citation{}, Gaps: []string{}, Impact: "The service on the host is degraded.",
		NextSteps: []string{"check again after the fix"}}
	for _, c := range a.Cites {
		out.Evidence = append(out.Evidence, report.Citation{TaskID: "{task:" + c.Task + "}", Quote: c.Quote, Claim: c.Claim})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// Scenario is one failure on a host.
type Scenario struct {
	Name   string
	Alert  string
	Host   string
	Parent Diag
	Tools  []Diag
	Truth  Truth
	// Script are the scripted model's turns of tool calls; after them it
	// answers.
	Script [][]Call
	// Right and Alt are correct answers in different words; Wrong is a
	// plausible wrong one.
	Right, Alt, Wrong Ans
	WantRefused       int // tool calls of the script that the fences refuse
}

// Grade scores res, the report of s's investigation, on its structured
// fields only: a structured answer, its category the truth's, its
// confidence not "confirmed" when the truth is unknown (and not
// "inconclusive" when it is known), and at least one citation the agent
// verified of a task of a Key diagnostic. Words anywhere in the text
// count for nothing.
func Grade(s Scenario, res report.Result) (bool, string) {
	if res.Status != report.StatusOK {
		return false, "report " + res.Status + ": " + res.Reason
	}
	a := res.Answer
	if a == nil || res.Unstructured {
		return false, "no structured answer"
	}
	if a.Category != s.Truth.Category {
		return false, fmt.Sprintf("category %s, want %s", a.Category, s.Truth.Category)
	}
	if s.Truth.Category == report.CategoryUnknown {
		if a.Confidence == report.ConfidenceConfirmed {
			return false, "confirmed, but the truth is unknown"
		}
		return true, ""
	}
	if a.Confidence == report.ConfidenceInconclusive {
		return false, "inconclusive, but the evidence shows the cause"
	}
	var ids []string
	for _, name := range s.Truth.Key {
		ids = append(ids, TaskIDs(res.Investigation, name)...)
	}
	for _, c := range a.Evidence { // only the verified citations are left in it
		if slices.Contains(ids, c.TaskID) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("no verified citation of %v (tasks %v)", s.Truth.Key, ids)
}

// Grounded is the grounding column: verified/cited, "-" without one.
func Grounded(res report.Result) string {
	if res.Grounding == nil || res.Answer == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", res.Grounding.Verified, res.Grounding.Cited)
}

// TaskIDs are the ids of the tasks of diagnostic name that ran in rec
// (the parent's for "parent").
func TaskIDs(rec *report.Investigation, name string) []string {
	if rec == nil {
		return nil
	}
	if name == "parent" {
		return []string{rec.Parent}
	}
	var out []string
	for _, st := range rec.Steps {
		for _, c := range st.Calls {
			if c.Tool == name && c.TaskID != "" && c.Result == "ran" {
				out = append(out, c.TaskID)
			}
		}
	}
	return out
}

var (
	calledRE = regexp.MustCompile(`\[called (\S+) .*?\(call (\S+)\)\]`)
	resultRE = regexp.MustCompile(`\[result of call (\S+)\]\ntask (\S+):`)
	parentRE = regexp.MustCompile(`The output above is task (\S+)\.`)
	taskRE   = regexp.MustCompile(`\{task:([a-z0-9_]+)\}`)
)

// Fill replaces {task:NAME} in answer by the task ids the conversation
// text shows: what a model citing its evidence would write. A name the
// conversation does not show becomes "unknown".
func Fill(answer, conversation string) string {
	byCall := map[string]string{}
	for _, m := range resultRE.FindAllStringSubmatch(conversation, -1) {
		byCall[m[1]] = m[2]
	}
	ids := map[string]string{}
	for _, m := range calledRE.FindAllStringSubmatch(conversation, -1) {
		if id, ok := byCall[m[2]]; ok {
			ids[m[1]] = id
		}
	}
	if m := parentRE.FindStringSubmatch(conversation); m != nil {
		ids["parent"] = m[1]
	}
	return taskRE.ReplaceAllStringFunc(answer, func(s string) string {
		if id, ok := ids[s[len("{task:"):len(s)-1]]; ok {
			return id
		}
		return "unknown"
	})
}

// Transcript is a conversation as text, tool calls and results in the
// form the last turn without tools sends them: what Fill reads.
func Transcript(system string, msgs []report.Message) string {
	var b strings.Builder
	b.WriteString(system)
	for _, m := range msgs {
		b.WriteString("\n" + m.Text)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "\n[called %s %s (call %s)]", c.Name, c.Input, c.ID)
		}
		for _, t := range m.ToolResults {
			fmt.Fprintf(&b, "\n[result of call %s]\n%s", t.CallID, t.Text)
		}
	}
	return b.String()
}

// Row is one scenario's line of the evaluation table.
type Row struct {
	Scenario  string
	Pass      bool
	Why       string
	Status    string
	Category  string
	Grounded  string
	Steps     int
	ToolCalls int
	Refused   int
	InTokens  int
	OutTokens int
	CostUSD   float64
	LatencyS  float64
}

// TableHeader is the header of the table Row.String lines form.
const TableHeader = "| scenario | grade | category | grounded | steps | tool calls (refused) | tokens in/out | cost USD | latency s | why |\n|---|---|---|---|---|---|---|---|---|---|"

// RowOf grades res, the report of s.
func RowOf(s Scenario, res report.Result) Row {
	r := Row{Scenario: s.Name, Status: res.Status, InTokens: res.InputTokens, OutTokens: res.OutputTokens, LatencyS: res.LatencyS,
		Category: "-", Grounded: Grounded(res)}
	if res.Answer != nil {
		r.Category = res.Answer.Category
	}
	if rec := res.Investigation; rec != nil {
		r.Steps, r.CostUSD = len(rec.Steps), rec.CostUSD
		for _, st := range rec.Steps {
			r.ToolCalls += len(st.Calls) + st.Dropped
			r.Refused += st.Dropped
			for _, c := range st.Calls {
				if c.Result != "ran" {
					r.Refused++
				}
			}
		}
	}
	r.Pass, r.Why = Grade(s, res)
	return r
}

func (r Row) String() string {
	grade := "FAIL"
	if r.Pass {
		grade = "pass"
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %d | %d (%d) | %d/%d | %.4f | %.1f | %s |",
		r.Scenario, grade, r.Category, r.Grounded, r.Steps, r.ToolCalls, r.Refused, r.InTokens, r.OutTokens, r.CostUSD, r.LatencyS,
		strings.ReplaceAll(r.Why, "|", "/"))
}

// Summary is the table's last line: the pass rate and the totals.
func Summary(rows []Row) string {
	var pass, tin, tout int
	var cost, lat float64
	for _, r := range rows {
		if r.Pass {
			pass++
		}
		tin, tout, cost, lat = tin+r.InTokens, tout+r.OutTokens, cost+r.CostUSD, lat+r.LatencyS
	}
	rate := 0.0
	if len(rows) > 0 {
		rate = 100 * float64(pass) / float64(len(rows))
	}
	return fmt.Sprintf("\npassed %d/%d (%.0f %%), tokens %d in / %d out, cost %.4f USD, latency %.1f s in all", pass, len(rows), rate, tin, tout, cost, lat)
}
