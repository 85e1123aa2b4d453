package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/task"
)

// MaxBody is the largest body any decoder reads, whatever intake.max_body
// says: an Alertmanager group of a few thousand alerts fits in it.
const MaxBody = 32 << 20

// Reasons a whole body is refused (HTTP 400, or 413 for the size).
const (
	ReasonTooLarge           = task.ReasonTooLarge // body_too_large
	ReasonMalformed          = task.ReasonMalformed
	ReasonUnsupportedVersion = "unsupported_version"
	ReasonNotAnAlarm         = "not_an_alarm"
)

// Limits on what one alert may carry; past them the alert is rejected
// (malformed_alert), the others of the payload are not.
const (
	maxFieldLen = 512 // name, host, severity, event id (a task's alert fields allow 512)
	maxLabels   = 128 // labels, annotations or dimensions of one alert
	maxValueLen = 4096
	maxItems    = 10000 // alerts in one payload
)

// strict are the options of every decode: exact member names, no
// duplicates at any level, valid UTF-8.
var strict = json.JoinOptions(
	json.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false))

// unmarshal decodes b into out strictly; known says whether unknown
// members are refused.
func unmarshal(b []byte, out any, refuseUnknown bool) error {
	return json.Unmarshal(b, out, strict, json.RejectUnknownMembers(refuseUnknown))
}

func bodyError(body []byte) error {
	if len(body) > MaxBody {
		return &task.Error{Reason: ReasonTooLarge, Detail: fmt.Sprintf("%d bytes exceeds %d", len(body), MaxBody)}
	}
	if !utf8.Valid(body) {
		return &task.Error{Reason: ReasonMalformed, Detail: "body is not valid UTF-8"}
	}
	return nil
}

func malformed(err error) error {
	return &task.Error{Reason: ReasonMalformed, Detail: jsonDetail(err)}
}

// maxDetail bounds an error's detail: it may quote the body.
const maxDetail = 256

func jsonDetail(err error) string { return clip(err.Error()) }

// clip cuts d to maxDetail bytes on a rune boundary.
func clip(d string) string {
	if len(d) <= maxDetail {
		return d
	}
	return utf8cut.Head(d, maxDetail) + "…"
}

// Reason returns the machine-readable reason of a decode error ("" if err
// is not one).
func Reason(err error) string { return task.Reason(err) }

// flexString reads a JSON string, number or boolean as a string, and null
// as "": senders template their bodies, and a macro may come out bare.
type flexString string

func (s *flexString) UnmarshalJSON(b []byte) error {
	v := jsontext.Value(b)
	switch v.Kind() {
	case '"':
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		*s = flexString(str)
	case '0', 't', 'f':
		*s = flexString(b)
	case 'n':
		*s = ""
	default:
		return errors.New("want a string or a number")
	}
	return nil
}

// checkAlert applies the per-alert limits; the answer is a reason and a
// detail, "" when the alert is within them.
func checkAlert(a *Received) (string, string) {
	for _, f := range [...]struct{ name, val string }{{"name", a.Name}, {"host", a.Host}, {"severity", a.Severity}, {"event_id", a.EventID}} {
		if len(f.val) > maxFieldLen || strings.ContainsFunc(f.val, isControl) {
			return ReasonMalformedAlert, f.name + " is longer than " + strconv.Itoa(maxFieldLen) + " bytes or holds control characters"
		}
	}
	for _, m := range [...]struct {
		name string
		m    map[string]string
	}{{"labels", a.Labels}, {"annotations", a.Annotations}, {"dimensions", a.Dimensions}} {
		if len(m.m) > maxLabels {
			return ReasonMalformedAlert, m.name + " has more than " + strconv.Itoa(maxLabels) + " entries"
		}
		for k, v := range m.m {
			if len(k) > maxFieldLen || len(v) > maxValueLen {
				return ReasonMalformedAlert, m.name + " has an entry longer than allowed"
			}
		}
	}
	if a.EventID == "" {
		return ReasonMissingEventID, "the alert carries nothing to identify its event"
	}
	return "", ""
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// resolvedSuffix marks the event id of a resolved alert: its resolution is
// an event of its own, which the limiter's dedupe must not take for a
// repeat of the firing that shares the source's id (Alertmanager's
// fingerprint and startsAt, Zabbix's problem {EVENT.ID}).
const resolvedSuffix = "/resolved"

// add appends a to p, or its rejection if it breaks a limit.
func (p *Payload) add(i int, a Received) {
	if a.Status == StatusResolved && a.EventID != "" {
		a.EventID += resolvedSuffix
	}
	if r, d := checkAlert(&a); r != "" {
		p.Rejected = append(p.Rejected, Outcome{Index: i, Reason: r, Detail: d})
		return
	}
	p.Items = append(p.Items, Item{Index: i, Alert: a})
}

// hashID derives an event id from the parts that identify an alert when
// the source sends none: the same alert gives the same id on every resend.
func hashID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// labelParts lists a map's entries in key order, for hashID.
func labelParts(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, m[k])
	}
	return out
}

// splitArray decodes a JSON array into its elements, strictly, refusing
// more than maxItems.
func splitArray(b jsontext.Value) ([]jsontext.Value, error) {
	var items []jsontext.Value
	if err := unmarshal(b, &items, true); err != nil {
		return nil, err
	}
	if len(items) > maxItems {
		return nil, fmt.Errorf("%d alerts exceed %d", len(items), maxItems)
	}
	return items, nil
}

// Decode decodes body as the named source (alertmanager, zabbix,
// cloudwatch, generic), for callers that get the source from a flag or a
// path (`autodiag routes test --source`); ok is false for another name.
func Decode(source string, body []byte) (p Payload, ok bool, err error) {
	var dec func([]byte) (Payload, error)
	switch source {
	case SourceAlertmanager:
		dec = DecodeAlertmanager
	case SourceZabbix:
		dec = DecodeZabbix
	case SourceCloudWatch:
		dec = DecodeCloudWatch
	case SourceGeneric:
		dec = DecodeGeneric
	default:
		return Payload{}, false, nil
	}
	p, err = dec(body)
	return p, true, err
}
