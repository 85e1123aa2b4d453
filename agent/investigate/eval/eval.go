package eval

import (
	"fmt"
	"regexp"
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

// Truth is what a correct report says: each group of Cause has at least
// one of its words (case-insensitive) in the Root cause section, and the
// Evidence section cites the task id of each diagnostic in Cite ("parent"
// is the alerting task).
type Truth struct {
	Cause [][]string
	Cite  []string
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
	// answers Right (or Wrong). {task:NAME} in an answer is the task id
	// of NAME's call ({task:parent}: the alerting task).
	Script      [][]Call
	Right       string
	Wrong       string
	WantRefused int // tool calls of the script that the fences refuse
}

// Grade scores md, the report of rec's investigation, against s's truth:
// pass, and why not.
func Grade(s Scenario, md string, rec *report.Investigation) (bool, string) {
	rc := strings.ToLower(section(md, "Root cause"))
	for _, group := range s.Truth.Cause {
		hit := false
		for _, w := range group {
			if strings.Contains(rc, strings.ToLower(w)) {
				hit = true
				break
			}
		}
		if !hit {
			return false, fmt.Sprintf("root cause names none of %v", group)
		}
	}
	ev := section(md, "Evidence")
	for _, name := range s.Truth.Cite {
		ids := TaskIDs(rec, name)
		cited := false
		for _, id := range ids {
			if strings.Contains(ev, id) {
				cited = true
			}
		}
		if !cited {
			return false, fmt.Sprintf("evidence cites no task of %s (%v)", name, ids)
		}
	}
	return true, ""
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

// section is the text of a Markdown "## title" section, "" when absent.
func section(md, title string) string {
	re := regexp.MustCompile(`(?mi)^#+\s*` + regexp.QuoteMeta(title) + `\s*$`)
	loc := re.FindStringIndex(md)
	if loc == nil {
		return ""
	}
	rest := md[loc[1]:]
	if next := regexp.MustCompile(`(?m)^#+\s`).FindStringIndex(rest); next != nil {
		rest = rest[:next[0]]
	}
	return rest
}

var (
	calledRE = regexp.MustCompile(`\[called (\S+) .*?\(call (\S+)\)\]`)
	resultRE = regexp.MustCompile(`\[result of call (\S+)\]\ntask (\S+):`)
	parentRE = regexp.MustCompile(`The output above is task (\S+)\.`)
)

// Fill replaces {task:NAME} in answer by the task ids the conversation
// text shows (the last turn's flattened text): what a model citing its
// evidence would write.
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
	return regexp.MustCompile(`\{task:([a-z0-9_]+)\}`).ReplaceAllStringFunc(answer, func(s string) string {
		name := s[len("{task:") : len(s)-1]
		if id, ok := ids[name]; ok {
			return "[task:" + id + "]"
		}
		return "[task:unknown]"
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
	Steps     int
	ToolCalls int
	Refused   int
	InTokens  int
	OutTokens int
	CostUSD   float64
	LatencyS  float64
}

// TableHeader is the header of the table Row.String lines form.
const TableHeader = "| scenario | grade | steps | tool calls (refused) | tokens in/out | cost USD | latency s | why |\n|---|---|---|---|---|---|---|---|"

// RowOf grades res, the report of s.
func RowOf(s Scenario, res report.Result) Row {
	r := Row{Scenario: s.Name, Status: res.Status, InTokens: res.InputTokens, OutTokens: res.OutputTokens, LatencyS: res.LatencyS}
	if rec := res.Investigation; rec != nil {
		r.Steps, r.CostUSD = len(rec.Steps), rec.CostUSD
		for _, st := range rec.Steps {
			r.ToolCalls += len(st.Calls)
			for _, c := range st.Calls {
				if c.Result != "ran" {
					r.Refused++
				}
			}
		}
	}
	if res.Status != report.StatusOK {
		r.Why = "report " + res.Status + ": " + res.Reason
		return r
	}
	r.Pass, r.Why = Grade(s, res.Markdown, res.Investigation)
	return r
}

func (r Row) String() string {
	grade := "FAIL"
	if r.Pass {
		grade = "pass"
	}
	return fmt.Sprintf("| %s | %s | %d | %d (%d) | %d/%d | %.4f | %.1f | %s |",
		r.Scenario, grade, r.Steps, r.ToolCalls, r.Refused, r.InTokens, r.OutTokens, r.CostUSD, r.LatencyS, strings.ReplaceAll(r.Why, "|", "/"))
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
