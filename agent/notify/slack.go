package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/report"
)

// Slack's limits on an incoming-webhook Block Kit message.
const (
	slackHeaderMax  = 150  // plain_text of a header block
	slackSectionMax = 3000 // text of a section block
	slackFieldMax   = 2000 // one field of a section block
	slackFallback   = 300  // the notification text; ours stays short
)

// Slack posts a Block Kit message to an incoming webhook: a header
// (outcome, diagnostic, host), fields (duration, attempts, agent, ran on,
// alert), the output excerpt in a code block and how to see the whole.
type Slack struct {
	httpSink
}

// Send builds the message from the event in d.Body and posts it.
func (s *Slack) Send(ctx context.Context, d Delivery) error {
	var ev Event
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return &SendError{Permanent: true}
	}
	body, err := json.Marshal(SlackMessage(ev))
	if err != nil {
		return &SendError{Permanent: true}
	}
	return s.post(ctx, body, nil)
}

// SlackPayload is an incoming-webhook message.
type SlackPayload struct {
	Text   string       `json:"text"`
	Blocks []SlackBlock `json:"blocks"`
}

// SlackBlock is one Block Kit block (header, section or context).
type SlackBlock struct {
	Type     string       `json:"type"`
	Text     *SlackText   `json:"text,omitempty"`
	Fields   []*SlackText `json:"fields,omitempty"`
	Elements []*SlackText `json:"elements,omitempty"`
}

// SlackText is a Block Kit text object.
type SlackText struct {
	Type string `json:"type"` // plain_text or mrkdwn
	Text string `json:"text"`
}

// SlackMessage is the message for ev, every text within Slack's limits.
func SlackMessage(ev Event) SlackPayload {
	var title string
	var fields []*SlackText
	field := func(name, value string) {
		if value != "" {
			fields = append(fields, &SlackText{Type: "mrkdwn", Text: utf8cut.Head("*"+name+"*\n"+escapeMrkdwn(value), slackFieldMax)})
		}
	}
	var blocks []SlackBlock
	switch {
	case ev.Task != nil:
		t := ev.Task
		title = fmt.Sprintf("%s %s: %s on %s", icon(ev.Type), headline(ev.Type, t.Outcome), t.Diagnostic, t.Host)
		if !t.StartedAt.IsZero() && !t.FinishedAt.IsZero() {
			field("Duration", t.FinishedAt.Sub(t.StartedAt).Round(time.Millisecond).String())
		}
		field("Attempts", fmt.Sprint(t.Attempts))
		field("Agent", firstNonEmpty(t.Owner, ev.InstanceID))
		// The machine the output describes: the agent that ran it.
		field("Ran on", t.RanOn.String())
		if t.Alert != nil {
			field("Alert", t.Alert.Name)
		}
		if t.ExitCode != nil {
			field("Exit code", fmt.Sprint(*t.ExitCode))
		}
		field("Reason", t.Reason)
		blocks = append(blocks, SlackBlock{Type: "header", Text: &SlackText{Type: "plain_text", Text: utf8cut.Head(title, slackHeaderMax)}})
		if len(fields) > 0 {
			blocks = append(blocks, SlackBlock{Type: "section", Fields: fields})
		}
		show := "autodiag show " + t.ID
		if t.OutputURL != "" {
			show = t.OutputURL
		}
		if ev.Type == EventResolved {
			blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: escapeMrkdwn(resolvedLine(t.Report))}})
		} else if ev.Type == EventReport {
			blocks = append(blocks, reportBlocks(t.Report, show)...)
		} else if t.Output != "" {
			blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: codeBlock(t.Output, show)}})
		}
		blocks = append(blocks, SlackBlock{Type: "context", Elements: []*SlackText{{Type: "mrkdwn", Text: utf8cut.Head(escapeMrkdwn("`"+show+"`  ·  delivery "+ev.ID), slackSectionMax)}}})
		if t.TraceURL != "" {
			// A link from the operator's own template: Slack's <url|text>.
			blocks = append(blocks, SlackBlock{Type: "context", Elements: []*SlackText{{Type: "mrkdwn",
				Text: utf8cut.Head("<"+slackURL(t.TraceURL)+"|trace "+t.TraceID+">", slackSectionMax)}}})
		}
	case ev.Drain != nil:
		dr := ev.Drain
		title = fmt.Sprintf("%s %s on %s", icon(ev.Type), strings.ReplaceAll(string(ev.Type), "_", " "), ev.InstanceID)
		field("Source", dr.Source)
		field("Reason", dr.Reason)
		field("Deadline", dr.Deadline.UTC().Format(time.RFC3339))
		field("Result", dr.Result)
		if dr.Released > 0 {
			field("Released", fmt.Sprint(dr.Released))
		}
		if dr.Cancelled > 0 {
			field("Cancelled", fmt.Sprint(dr.Cancelled))
		}
		blocks = append(blocks, SlackBlock{Type: "header", Text: &SlackText{Type: "plain_text", Text: utf8cut.Head(title, slackHeaderMax)}})
		if len(fields) > 0 {
			blocks = append(blocks, SlackBlock{Type: "section", Fields: fields})
		}
	default:
		title = fmt.Sprintf("%s %s on %s", icon(ev.Type), ev.Type, ev.InstanceID)
		blocks = append(blocks, SlackBlock{Type: "header", Text: &SlackText{Type: "plain_text", Text: utf8cut.Head(title, slackHeaderMax)}})
	}
	return SlackPayload{Text: utf8cut.Head(title, slackFallback), Blocks: blocks}
}

// slackMaxGaps bounds the gaps a report message lists one per line; the
// rest are counted.
const slackMaxGaps = 20

// reportBlocks render a report event's report: its fields (confidence,
// model, tokens, cost, how an investigation ended), the answer, and when
// the report investigated, the tree of steps and tool calls (task ids and
// outcomes), the gaps and the evidence cited. Every text is cut to Slack's
// limits, and there are at most six blocks whatever the report holds.
// The report is the record's, already redacted.
func reportBlocks(raw json.RawMessage, show string) []SlackBlock {
	var r report.Result
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil || r.Status == "" {
		return nil
	}
	var fields []*SlackText
	field := func(name, value string) {
		if value != "" {
			fields = append(fields, &SlackText{Type: "mrkdwn", Text: utf8cut.Head("*"+name+"*\n"+escapeMrkdwn(value), slackFieldMax)})
		}
	}
	field("Report", r.Status)
	field("Confidence", confidenceWord(r.Confidence))
	if r.Answer != nil {
		field("Category", r.Answer.Category)
	}
	if g := r.Grounding; g != nil && r.Answer != nil {
		field("Grounding", fmt.Sprintf("%d of %d citations verified", g.Verified, g.Cited))
	}
	if r.Unstructured {
		field("Answer", "unstructured: not checked")
	}
	field("Model", strings.Trim(r.Provider+" "+r.Model, " "))
	inv := r.Investigation
	in, out := r.InputTokens, r.OutputTokens
	if inv != nil {
		in, out = max(in, inv.InputTokens), max(out, inv.OutputTokens)
	}
	if in+out > 0 {
		field("Tokens", fmt.Sprintf("%d in, %d out", in, out))
	}
	if inv != nil {
		calls := 0
		for _, s := range inv.Steps {
			calls += len(s.Calls)
		}
		field("Cost", fmt.Sprintf("%.4f USD", inv.CostUSD))
		field("Investigation", fmt.Sprintf("%d steps, %d tool calls, ended by %s", len(inv.Steps), calls, inv.EndedBy))
	}
	field("Reason", r.Reason)
	blocks := []SlackBlock{{Type: "section", Fields: fields}}
	if r.Markdown != "" {
		blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: textBlock(Mrkdwn(r.Markdown), show)}})
	}
	if inv == nil {
		return blocks
	}
	blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: codeBlock(inv.Tree(), show)}})
	if len(inv.Gaps) > 0 {
		var b strings.Builder
		b.WriteString("*Gaps*: could not check\n")
		for i, g := range inv.Gaps {
			if i == slackMaxGaps {
				fmt.Fprintf(&b, "… and %d more\n", len(inv.Gaps)-i)
				break
			}
			line := "• " + g.Tool
			if g.Host != "" {
				line += " on " + g.Host
			}
			line += ": " + g.Result
			if g.Reason != "" {
				line += " (" + strings.ReplaceAll(g.Reason, "\n", " ") + ")"
			}
			b.WriteString(utf8cut.Head(line, 300) + "\n")
		}
		blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: utf8cut.Head(escapeMrkdwn(b.String()), slackSectionMax)}})
	}
	if len(inv.Evidence) > 0 {
		blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn",
			Text: textBlock("*Evidence* (task ids): "+strings.Join(inv.Evidence, ", "), show)}})
	}
	return blocks
}

// confidenceWord is a report's confidence as a word and an emoji, so
// that it reads at a glance.
func confidenceWord(c string) string {
	switch c {
	case report.ConfidenceConfirmed:
		return "🟢 confirmed"
	case report.ConfidenceLikely:
		return "🟡 likely"
	case report.ConfidenceInconclusive:
		return "⚪ inconclusive"
	}
	return c
}

var (
	mdHeading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	mdBullet  = regexp.MustCompile(`(?m)^(\s*)[-*]\s+`)
	mdBold    = regexp.MustCompile(`\*\*([^*\n]+)\*\*`)
)

// Mrkdwn is a report's Markdown in Slack's mrkdwn: headings in bold,
// bullets as •, **bold** as *bold*; code spans stay as they are (mrkdwn
// has them). The result is escaped later, with the rest of the text.
func Mrkdwn(md string) string {
	md = mdBold.ReplaceAllString(md, "*$1*")
	md = mdHeading.ReplaceAllString(md, "*$1*")
	return mdBullet.ReplaceAllString(md, "$1• ")
}

// textBlock is s escaped for mrkdwn within slackSectionMax: an excerpt
// when it does not fit, saying where the whole is.
func textBlock(s, show string) string {
	limit := slackSectionMax
	for {
		text := escapeMrkdwn(Excerpt(s, limit, show))
		if len(text) <= slackSectionMax || limit <= 0 {
			return utf8cut.Head(text, slackSectionMax)
		}
		limit -= len(text) - slackSectionMax
	}
}

// codeBlock is output in a code block of at most slackSectionMax
// characters: an excerpt when it does not fit, saying where the whole is.
func codeBlock(output, show string) string {
	const fences = len("```\n\n```")
	limit := slackSectionMax - fences
	for {
		text := escapeMrkdwn(strings.ReplaceAll(Excerpt(output, limit, show), "```", "`\u200b``"))
		if len(text)+fences <= slackSectionMax || limit <= 0 {
			return utf8cut.Head("```\n"+text+"\n```", slackSectionMax)
		}
		limit -= len(text) + fences - slackSectionMax
	}
}

// escapeMrkdwn escapes the three characters Slack's mrkdwn reserves.
func escapeMrkdwn(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func headline(t EventType, outcome string) string {
	switch t {
	case EventReport:
		return "report ready for " + outcome
	case EventResolved:
		return "alert resolved, task " + outcome
	case EventApprovalRequested:
		return "approval requested"
	}
	return strings.ReplaceAll(outcome, "_", " ")
}

func icon(t EventType) string {
	switch t {
	case EventSucceeded, EventDrainCompleted, EventResolved:
		return "✅"
	case EventReport:
		return "📝"
	case EventRateLimited, EventDrainStarted, EventApprovalRequested:
		return "⏳"
	}
	return "❌"
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// slackURL escapes what would end a Slack <url|text> link early.
func slackURL(u string) string {
	return strings.NewReplacer("<", "%3C", ">", "%3E", "|", "%7C").Replace(u)
}

// resolvedLine says when the alert resolved and how long after the report.
func resolvedLine(raw json.RawMessage) string {
	var r report.Result
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil || r.ResolvedAt == nil {
		return "The alert resolved."
	}
	line := "The alert resolved at " + r.ResolvedAt.UTC().Format(time.RFC3339)
	if !r.CreatedAt.IsZero() {
		line += fmt.Sprintf(", %s after the report (confidence %s)", r.ResolvedAt.Sub(r.CreatedAt).Round(time.Second), firstNonEmpty(r.Confidence, "none"))
	}
	return line + "."
}
