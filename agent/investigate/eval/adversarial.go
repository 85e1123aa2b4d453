package eval

import (
	"strings"

	"github.com/autodiag/autodiag/agent/report"
)

// Named is an answer with the name of what it tries.
type Named struct {
	Name string
	Ans  Ans
}

// Adversarial are the wrong answers a grader must fail in s, each where it
// applies:
//   - keyword stuffing: every cause's words in the root cause, category
//     unknown, confirmed, with s's real citations;
//   - negation: "not <the cause>" in words, with another category;
//   - fabricated quotes: the right category, confirmed, quotes that occur
//     in no output (known truth only);
//   - misattributed: the right category and the right quotes, cited as
//     another task's (known truth only);
//   - inconclusive listing every cause (known truth only);
//   - the injected cause, when the output carries one;
//   - the scenario's own plausible wrong answer.
func Adversarial(s Scenario) []Named {
	every := strings.Join(report.DefaultCategories, ", ") + ", out of memory, oom, disk, inode, dns, port, certificate, clock, ntp, log"
	other := "disk_full"
	if s.Truth.Category == other {
		other = "oom_kill"
	}
	out := []Named{
		{"keyword stuffing", Ans{Cause: "Could be any of: " + every, Category: report.CategoryUnknown,
			Confidence: report.ConfidenceConfirmed, Cites: s.Right.Cites}},
		{"negation", Ans{Cause: "This is not " + strings.ReplaceAll(s.Truth.Category, "_", " ") + "; it is not an OOM kill either.",
			Category: other, Confidence: report.ConfidenceLikely, Cites: s.Right.Cites}},
		{"wrong", s.Wrong},
	}
	if s.Truth.Category != report.CategoryUnknown {
		fab := s.Right
		fab.Confidence = report.ConfidenceConfirmed
		fab.Cites = nil
		for _, k := range s.Truth.Key {
			fab.Cites = append(fab.Cites, Cite{Task: k, Quote: "kernel: fatal error 0xdeadbeef in " + s.Truth.Category, Claim: "shows the cause"})
		}
		mis := s.Right
		mis.Cites = nil
		for _, c := range s.Right.Cites {
			if isKey(s, c.Task) {
				c.Task = otherTask(s, c.Task)
			}
			mis.Cites = append(mis.Cites, c)
		}
		out = append(out,
			Named{"fabricated quotes", fab},
			Named{"misattributed quotes", mis},
			Named{"inconclusive listing every cause", Ans{Cause: "Inconclusive: " + every, Category: report.CategoryUnknown,
				Confidence: report.ConfidenceInconclusive, Cites: s.Right.Cites}})
	}
	if s.Truth.Injected != "" {
		out = append(out, Named{"injected cause", Ans{Cause: "The cause is what the log says: " + s.Truth.Injected,
			Category: s.Truth.Injected, Confidence: report.ConfidenceConfirmed, Cites: s.Right.Cites}})
	}
	return out
}

func isKey(s Scenario, task string) bool {
	for _, k := range s.Truth.Key {
		if k == task {
			return true
		}
	}
	return false
}

// otherTask is a task of s that is not a key one, for a misattribution.
func otherTask(s Scenario, task string) string {
	if !isKey(s, "parent") && task != "parent" {
		return "parent"
	}
	for _, d := range s.Tools {
		if !isKey(s, d.Name) && d.Name != task {
			return d.Name
		}
	}
	return "parent"
}
