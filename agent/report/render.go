package report

import (
	"fmt"
	"strings"
)

// Render is the Markdown of a structured answer, written by the agent
// from the fields (never by the model): Root cause with its category,
// Evidence (verified citations with their task ids), the citations the
// agent could not verify, Impact, Next steps, Gaps (the model's, then the
// tool calls that were refused) and Confidence. Quotes are shown as code
// spans, so that what a host printed is never read as Markdown.
func Render(a Answer, g *Grounding, toolGaps []Gap) string {
	var b strings.Builder
	b.WriteString("## Root cause\n")
	b.WriteString(oneLine(a.RootCause) + "\n\nCategory: `" + a.Category + "`\n")
	b.WriteString("\n## Evidence\n")
	if len(a.Evidence) == 0 {
		b.WriteString("None verified.\n")
	}
	for _, c := range a.Evidence {
		claim := oneLine(c.Claim)
		if claim == "" {
			claim = "cited"
		}
		fmt.Fprintf(&b, "- %s [task:%s]\n  %s\n", claim, c.TaskID, CodeSpan(oneLine(c.Quote)))
	}
	if g != nil && len(g.Unverified) > 0 {
		b.WriteString("\n## Unverified citations\nNot used as evidence:\n")
		for _, u := range g.Unverified {
			fmt.Fprintf(&b, "- [task:%s] %s: %s\n", oneLine(u.TaskID), CodeSpan(oneLine(u.Quote)), u.Reason)
		}
	}
	b.WriteString("\n## Impact\n")
	b.WriteString(orNone(oneLine(a.Impact)) + "\n")
	b.WriteString("\n## Next steps\n")
	if len(a.NextSteps) == 0 {
		b.WriteString("None given.\n")
	}
	for _, s := range a.NextSteps {
		b.WriteString("- " + oneLine(s) + "\n")
	}
	b.WriteString(GapsSection(a.Gaps, toolGaps))
	b.WriteString("\n## Confidence\n" + a.Confidence + "\n")
	if g != nil && g.Lowered != "" {
		b.WriteString("\nLowered by the agent: " + g.Lowered + ".\n")
	}
	return b.String()
}

// GapsSection lists what could not be checked: the model's own gaps, then
// each refused tool call. Every report of an investigation has it.
func GapsSection(model []string, tools []Gap) string {
	var b strings.Builder
	b.WriteString("\n## Gaps\n")
	if len(model) == 0 && len(tools) == 0 {
		b.WriteString("None: every diagnostic asked for ran.\n")
		return b.String()
	}
	for _, g := range model {
		b.WriteString("- " + oneLine(g) + "\n")
	}
	for _, g := range tools {
		fmt.Fprintf(&b, "- could not check `%s`", strings.ReplaceAll(g.Tool, "`", "'"))
		if g.Host != "" {
			fmt.Fprintf(&b, " on %s", g.Host)
		}
		fmt.Fprintf(&b, ": %s", g.Result)
		if g.Reason != "" {
			fmt.Fprintf(&b, " (%s)", oneLine(g.Reason))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// CodeSpan is s as a Markdown code span whatever backticks it holds.
func CodeSpan(s string) string {
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return fence + pad + s + pad + fence
}

// oneLine folds line breaks, so a field cannot start a heading or a list
// of its own in the rendered report.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func orNone(s string) string {
	if s == "" {
		return "Not stated."
	}
	return s
}
