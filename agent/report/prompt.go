package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/taskview"
)

// Evidence is what a report is written from: one finished task.
type Evidence struct {
	TaskID     string        `json:"task_id"`
	Alert      EvidenceAlert `json:"alert"`
	Diagnostic string        `json:"diagnostic"`
	Argv       []string      `json:"argv"` // after substitution
	Host       string        `json:"host"`
	ExitCode   *int          `json:"exit_code,omitempty"` // nil: the process did not exit (timed out, not started)
	Outcome    string        `json:"outcome"`
	// Duration is the run's, in seconds in JSON.
	Duration  Seconds `json:"duration_s"`
	Truncated bool    `json:"truncated"` // the stored output was cut at runner.max_output
	// Output is the run's output, already redacted.
	Output string `json:"output"`
	// RanOn is the agent that ran the diagnostic, the machine its output
	// describes; nil for a record that does not say.
	RanOn *taskview.RanOn `json:"ran_on,omitempty"`
}

// EvidenceAlert is the alert a task came from (the one taskview.Alert,
// its context bounded and redacted; an investigation's prompt shows it)
// with the task's severity, which evidence has always carried under
// "alert". Embedding keeps the JSON of queued jobs as it was.
type EvidenceAlert struct {
	taskview.Alert
	Severity string `json:"severity,omitempty"`
}

// Seconds is a duration that is a number of seconds in JSON.
type Seconds time.Duration

// MarshalJSON writes the seconds as a number.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(s).Seconds(), 'f', -1, 64), nil
}

// UnmarshalJSON reads a number of seconds.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("report: duration_s: %w", err)
	}
	*s = Seconds(f * float64(time.Second))
	return nil
}

// Prompt is what every provider is sent: a system message and one user
// message.
type Prompt struct {
	System string
	User   string
}

// SystemPrompt is the system message of every report.
const SystemPrompt = `You are an experienced site reliability engineer on call for a fleet of EC2 instances.
You are given one alert and the result of one diagnostic command run on the affected host.
Answer only from this evidence. Do not invent log lines, metrics, hosts or causes that the evidence does not show.
When the evidence does not establish a cause, say "inconclusive" rather than guess.
The output may contain [REDACTED:<name>] markers where secrets were removed; do not try to reconstruct them.
Write Markdown with exactly these sections, in this order:

## Root cause
One sentence.

## Analysis
A short analysis that cites the output lines it relies on (quote them).

## Impact
What is or will be affected, as far as the evidence shows.

## Next steps
Two or three concrete commands or checks, most useful first.

## Confidence
One word: confirmed, likely or inconclusive.`

// BuildPrompt is the one place a prompt is made: the same evidence and
// input bounds always give the same text.
func BuildPrompt(ev Evidence, in Input) Prompt {
	return Prompt{System: SystemPrompt, User: EvidenceText(ev, in) + writeNow}
}

// writeNow closes the single-shot report's user message.
const writeNow = "\nWrite the report now, with the sections Root cause, Analysis, Impact, Next steps and Confidence.\n"

// EvidenceText is the evidence as the model reads it (the alert, the
// diagnostic and the tail of its output within in's bounds): the user
// message of a report before its closing request, and the start of an
// investigation's first message.
func EvidenceText(ev Evidence, in Input) string {
	var b strings.Builder
	line := func(k, v string) {
		if v == "" {
			v = "(unknown)"
		}
		fmt.Fprintf(&b, "%s: %s\n", k, v)
	}
	b.WriteString("# Alert\n")
	line("Source", ev.Alert.Source)
	line("Name", ev.Alert.Name)
	line("Severity", ev.Alert.Severity)
	line("Event id", ev.Alert.EventID)
	b.WriteString("\n# Diagnostic\n")
	line("Name", ev.Diagnostic)
	line("Command", quoteArgv(ev.Argv))
	line("Host", ev.Host)
	if ev.RanOn != nil {
		line("Ran on", ev.RanOn.String())
	}
	exit := "none (the process did not exit by itself)"
	if ev.ExitCode != nil {
		exit = strconv.Itoa(*ev.ExitCode)
	}
	line("Exit code", exit)
	line("Outcome", ev.Outcome)
	line("Duration", strconv.FormatFloat(time.Duration(ev.Duration).Seconds(), 'f', 3, 64)+" s")
	line("Output truncated by the agent", strconv.FormatBool(ev.Truncated))
	tail, shown, total := Tail(ev.Output, in.MaxLines, int(in.MaxBytes))
	b.WriteString("\n# Output\n")
	if total == 0 {
		b.WriteString("(no output)\n")
	} else {
		if shown < total {
			fmt.Fprintf(&b, "The last %d of %d lines:\n", shown, total)
		} else {
			fmt.Fprintf(&b, "All %d lines:\n", total)
		}
		fence := Fence(tail)
		b.WriteString(fence + "\n")
		b.WriteString(tail)
		b.WriteString(fence + "\n")
	}
	return b.String()
}

// quoteArgv shows an argv the way a shell would take it back.
func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' || r == '+' || r == '@' ||
				r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Tail returns the last maxLines lines of s, cut further to its last
// maxBytes bytes at a line start (or, for one longer line, at a rune
// start), with how many lines it holds and how many s has. A final line
// end does not count as a line of its own.
func Tail(s string, maxLines, maxBytes int) (tail string, shown, total int) {
	if s == "" {
		return "", 0, 0
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	total = len(lines)
	size := 0
	for i := total - 1; i >= 0 && shown < maxLines; i-- {
		if size+len(lines[i])+1 > maxBytes {
			break
		}
		size += len(lines[i]) + 1
		shown++
	}
	if shown == 0 {
		// The last line alone is longer than maxBytes: keep its end.
		return utf8cut.Tail(lines[total-1], maxBytes-1) + "\n", 1, total
	}
	return strings.Join(lines[total-shown:], "\n") + "\n", shown, total
}

// Fence is the Markdown code fence for quoting s: backticks, at least
// three, one more than the longest run of them in s, so that output
// holding a fence cannot end the quote (in the prompt, or a tool result).
func Fence(s string) string {
	return strings.Repeat("`", max(3, longestRun(s, '`')+1))
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	best, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			best = max(best, n)
		} else {
			n = 0
		}
	}
	return best
}
