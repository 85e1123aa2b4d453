package alert

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/autodiag/autodiag/agent/task"
)

// zabbixBody is what the media type deploy/zabbix/autodiag-media.yaml
// posts. Every value is a macro Zabbix expands to a string; a macro it
// cannot expand stays literal ("{EVENT.TAGSJSON}").
type zabbixBody struct {
	EventID    flexString     `json:"event_id"`
	EventValue flexString     `json:"event_value"`
	EventName  flexString     `json:"event_name"`
	Severity   flexString     `json:"severity"`
	Host       flexString     `json:"host"`
	HostIP     flexString     `json:"host_ip"`
	TriggerID  flexString     `json:"trigger_id"`
	Tags       jsontext.Value `json:"tags"`
}

type zabbixTag struct {
	Tag   string `json:"tag"`
	Value string `json:"value"`
}

// macroRE matches a Zabbix macro left unexpanded: {EVENT.TAGSJSON},
// {$USER.MACRO}, {HOST.IP1}, {?expression} is not one of them.
var macroRE = regexp.MustCompile(`^\{\$?[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*(:[^{}]*)?\}$`)

// unmacro returns "" for a value that is an unexpanded macro.
func unmacro(s flexString) string {
	v := strings.TrimSpace(string(s))
	if macroRE.MatchString(v) {
		return ""
	}
	return v
}

// DecodeZabbix reads the body of the autodiag Zabbix media type: one event.
// Macros Zabbix left unexpanded count as absent; tags come as a JSON
// string (what {EVENT.TAGSJSON} expands to) or a list. A problem event
// (event_value 1) is firing, a recovery (0) resolved; the event id is
// Zabbix's, which a recovery shares with its problem through the route's
// dedupe only if the route asks for resolved alerts.
func DecodeZabbix(body []byte) (Payload, error) {
	p := Payload{Source: SourceZabbix}
	if err := bodyError(body); err != nil {
		return p, err
	}
	var z zabbixBody
	if err := unmarshal(body, &z, true); err != nil {
		return p, malformed(err)
	}
	tags, err := zabbixTags(z.Tags)
	if err != nil {
		return p, &task.Error{Reason: ReasonMalformed, Field: "tags", Detail: jsonDetail(err)}
	}
	a := Received{
		Source:      SourceZabbix,
		Name:        unmacro(z.EventName),
		Host:        unmacro(z.Host),
		Severity:    normSeverity(unmacro(z.Severity)),
		EventID:     unmacro(z.EventID),
		Labels:      tags,
		Annotations: map[string]string{},
		Status:      StatusFiring,
	}
	if v := unmacro(z.HostIP); v != "" {
		a.Annotations["host_ip"] = v
	}
	if v := unmacro(z.TriggerID); v != "" {
		a.Annotations["trigger_id"] = v
	}
	switch v := unmacro(z.EventValue); v {
	case "1", "":
	case "0":
		a.Status = StatusResolved
	default:
		p.Ignored = append(p.Ignored, Outcome{Index: 0, Reason: ReasonNotProblem, Detail: fmt.Sprintf("event_value %.16q", v)})
		return p, nil
	}
	p.add(0, a)
	return p, nil
}

// zabbixTags reads tags given as a list of {tag, value}, as a string
// holding that list, as an unexpanded macro or as nothing. A tag that
// appears twice keeps its first value.
func zabbixTags(raw jsontext.Value) (map[string]string, error) {
	out := map[string]string{}
	if len(raw) == 0 || raw.Kind() == 'n' {
		return out, nil
	}
	if raw.Kind() == '"' {
		var s flexString
		if err := unmarshal(raw, &s, true); err != nil {
			return nil, err
		}
		str := unmacro(s)
		if str == "" {
			return out, nil
		}
		raw = jsontext.Value(str)
	}
	if raw.Kind() != '[' {
		return nil, errors.New("want a list of {tag, value}")
	}
	var list []zabbixTag
	if err := unmarshal(raw, &list, false); err != nil {
		return nil, err
	}
	if len(list) > maxLabels {
		return nil, fmt.Errorf("%d tags exceed %d", len(list), maxLabels)
	}
	for _, t := range list {
		if _, dup := out[t.Tag]; !dup {
			out[t.Tag] = t.Value
		}
	}
	return out, nil
}
