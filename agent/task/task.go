// Package task decodes and validates diagnostic task messages. Validation
// happens before anything touches Redis: the host is normalised, checked
// against the targets no task may name (this instance, its metadata
// service) and matched against the allow-list first, then the diagnostic
// and its parameters against the catalog. Every rejection carries a
// machine-readable reason.
package task

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/taskview"
)

// MaxBodySize is the largest task message accepted (SQS's own limit).
const MaxBodySize = 256 << 10

// Bounds of an alert's context in a task: what a sender or an alert can
// make every record and prompt hold.
const (
	MaxContextEntries    = 32
	MaxContextKeyBytes   = 128
	MaxContextValueBytes = 1024
)

// BoundContext is m with at most MaxContextEntries entries (the first by
// name), each name and value cut to its bound.
func BoundContext(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, min(len(m), MaxContextEntries))
	for _, k := range keys[:min(len(keys), MaxContextEntries)] {
		out[utf8cut.Head(k, MaxContextKeyBytes)] = utf8cut.Head(m[k], MaxContextValueBytes)
	}
	return out
}

// Task is one diagnostic request (the SQS message body).
type Task struct {
	ID         string            `json:"id,omitempty"`
	Host       string            `json:"host"`
	Diagnostic string            `json:"diagnostic"`
	Params     map[string]string `json:"params,omitempty"`
	Severity   string            `json:"severity,omitempty"`
	Alert      taskview.Alert    `json:"alert,omitzero"`
	CreatedAt  time.Time         `json:"created_at,omitzero"`
	// Origin is "investigation" for a root-cause investigation's tool
	// call, whose Parent task, Investigation id and Step it names; empty
	// for every other task.
	Origin        string `json:"origin,omitempty"`
	Parent        string `json:"parent,omitempty"`
	Investigation string `json:"investigation,omitempty"`
	Step          int    `json:"step,omitempty"`
	// OriginToken proves that the agent's own investigator sent a task of
	// origin "investigation" (SignOrigin): that origin picks the
	// investigation's limiter rule and skips the report, so no other
	// sender may claim it.
	OriginToken string `json:"origin_token,omitempty"`
}

// Field returns the value of a dotted field name, for limiter.dedupe.key
// (e.g. "alert.event_id"); ok is false for an unknown name.
func (t *Task) Field(name string) (string, bool) {
	switch name {
	case "id":
		return t.ID, true
	case "host":
		return t.Host, true
	case "diagnostic":
		return t.Diagnostic, true
	case "severity":
		return t.Severity, true
	case "origin":
		return t.Origin, true
	case "alert.source":
		return t.Alert.Source, true
	case "alert.name":
		return t.Alert.Name, true
	case "alert.event_id":
		return t.Alert.EventID, true
	}
	if p, ok := strings.CutPrefix(name, "params."); ok {
		return t.Params[p], true
	}
	return "", false
}

// Machine-readable rejection reasons.
const (
	ReasonTooLarge          = "body_too_large"
	ReasonMalformed         = "malformed_json"
	ReasonInvalidID         = "invalid_id"
	ReasonMissingHost       = "missing_host"
	ReasonInvalidHost       = "invalid_host"
	ReasonHostNotAllowed    = "host_not_allowed"
	ReasonHostForbidden     = "host_forbidden"
	ReasonIPLiteral         = "ip_literal_not_allowed"
	ReasonMissingDiagnostic = "missing_diagnostic"
	ReasonUnknownDiagnostic = "unknown_diagnostic"
	ReasonUnknownParam      = "unknown_param"
	ReasonMissingParam      = "missing_param"
	ReasonInvalidParam      = "invalid_param"
	ReasonInvalidSeverity   = "invalid_severity"
	ReasonInvalidAlert      = "invalid_alert"
	ReasonInvalidCreatedAt  = "invalid_created_at"
	ReasonStale             = "stale"
	ReasonInvalidOrigin     = "invalid_origin"
)

// Error is a rejection: the reason is stable for metrics and the DLQ, the
// detail is for people.
type Error struct {
	Reason string
	Field  string
	Detail string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Reason + ": " + e.Detail
	}
	return e.Reason + ": " + e.Field + ": " + e.Detail
}

// Reason returns the machine-readable reason of err, "" if it is not a
// rejection.
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func reject(reason, field, format string, args ...any) *Error {
	return &Error{Reason: reason, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Decode parses a message body strictly: size-capped, one JSON object,
// member names matched exactly (case-sensitive), no duplicate names at any
// level and no unknown fields. Case folding and "last duplicate wins" would
// let a body carry a second host that a reviewer or an upstream filter
// reading the first one never sees.
func Decode(body []byte) (Task, error) {
	var t Task
	if len(body) > MaxBodySize {
		return t, reject(ReasonTooLarge, "", "%d bytes exceeds %d", len(body), MaxBodySize)
	}
	if !utf8.Valid(body) {
		return t, reject(ReasonMalformed, "", "body is not valid UTF-8")
	}
	err := json.Unmarshal(body, &t,
		json.RejectUnknownMembers(true),
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false))
	if err != nil {
		return Task{}, reject(ReasonMalformed, "", "%s", taskDetail(err))
	}
	return t, nil
}

// taskFields are the members a task message may have, for an error that
// tells the sender what it may write (not the Go type it was decoded into).
var taskFields = func() string {
	var names []string
	rt := reflect.TypeFor[Task]()
	for i := range rt.NumField() {
		if n, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); n != "" && n != "-" {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}()

// taskDetail is jsonDetail for a task message: a member the message may
// not have or a value of the wrong JSON kind is named by its JSON pointer,
// with the valid members listed.
func taskDetail(err error) string {
	var te *json.SemanticError
	if !errors.As(err, &te) {
		return jsonDetail(err)
	}
	what := "a " + te.JSONKind.String() + " is not valid there"
	if errors.Is(err, json.ErrUnknownName) {
		what = "unknown field"
	}
	return truncate(fmt.Sprintf("at byte %d (%q): %s; valid fields: %s", te.ByteOffset, te.JSONPointer, what, taskFields), maxDetailLen)
}

// maxDetailLen bounds a decode error's detail: it quotes member names from
// the body, and the detail travels in log lines and the dead-letter
// attribute.
const maxDetailLen = 256

func jsonDetail(err error) string {
	var se *jsontext.SyntacticError
	var te *json.SemanticError
	var d string
	switch {
	case errors.As(err, &se):
		d = fmt.Sprintf("invalid JSON at byte %d (%q): %v", se.ByteOffset, se.JSONPointer, se.Err)
	case errors.As(err, &te):
		d = fmt.Sprintf("at byte %d: %v", te.ByteOffset, te)
	default:
		d = err.Error()
	}
	return truncate(d, maxDetailLen)
}

// Limits on field sizes.
const (
	MaxHostLen  = 253
	maxLabelLen = 63
	maxParamLen = 1024
	maxAlertLen = 512
)

var (
	idPattern       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)
	severityPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

// NormalizeHost lower-cases an ASCII host name, drops one trailing dot and
// checks its syntax (RFC 1123 labels). It rejects, rather than repairs,
// anything else: whitespace, control characters, non-ASCII (including
// Unicode look-alikes, which lower-casing could map onto ASCII), IDNA
// "xn--" labels, empty labels, labels that start or end with '-', and
// names over 253 characters.
func NormalizeHost(h string) (string, error) {
	if h == "" {
		return "", reject(ReasonMissingHost, "host", "empty")
	}
	if len(h) > MaxHostLen+1 {
		return "", reject(ReasonInvalidHost, "host", "longer than %d characters", MaxHostLen)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= utf8.RuneSelf {
			return "", reject(ReasonInvalidHost, "host", "non-ASCII character at byte %d (IDNA names are not accepted)", i)
		}
		if c <= ' ' || c == 0x7f {
			return "", reject(ReasonInvalidHost, "host", "whitespace or control character at byte %d", i)
		}
	}
	if hp, port, err := net.SplitHostPort(h); err == nil && port != "" && strings.Trim(port, "0123456789") == "" {
		return "", reject(ReasonInvalidHost, "host", "%q has a port: a task names a host, drop %q (use %q)", truncate(h, 64), ":"+port, truncate(hp, 64))
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if len(h) == 0 || len(h) > MaxHostLen {
		return "", reject(ReasonInvalidHost, "host", "length %d out of 1..%d", len(h), MaxHostLen)
	}
	for label := range strings.SplitSeq(h, ".") {
		switch {
		case label == "":
			return "", reject(ReasonInvalidHost, "host", "empty label")
		case len(label) > maxLabelLen:
			return "", reject(ReasonInvalidHost, "host", "label longer than %d characters", maxLabelLen)
		case label[0] == '-' || label[len(label)-1] == '-':
			return "", reject(ReasonInvalidHost, "host", "label %q starts or ends with '-'", label)
		case strings.HasPrefix(label, "xn--"):
			return "", reject(ReasonInvalidHost, "host", "IDNA label %q is not accepted", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", reject(ReasonInvalidHost, "host", "character %q is not allowed", c)
			}
		}
	}
	if endsInNumber(h) {
		// Resolvers read such a name as an IPv4 address in the forms
		// inet_aton accepts: "2852039166", "0xa9fea9fe", "0", "127.1",
		// "0251.0376.0251.0376" (octal). Only the one canonical spelling of
		// an address is a host, so an address has one name for the
		// allow-list, the forbidden ranges and the limiter keys alike.
		if a, err := netip.ParseAddr(h); err != nil || !a.Is4() {
			return "", reject(ReasonInvalidHost, "host", "%q is a numeric host form; only a dotted-quad IPv4 address without leading zeros is one", h)
		}
	}
	return h, nil
}

// catalogNames lists a catalog's diagnostics for an error, sorted, the
// first 20 of them: enough to see the name meant.
func catalogNames(c map[string]Spec) string {
	if len(c) == 0 {
		return "the catalog is empty"
	}
	names := slices.Sorted(maps.Keys(c))
	const shown = 20
	if len(names) > shown {
		return "have " + strings.Join(names[:shown], ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
	}
	return "have " + strings.Join(names, ", ")
}

// endsInNumber reports whether the last label of a normalised host is a
// number in decimal, octal or hexadecimal ("0x" prefix) notation, which
// makes resolvers parse the whole name as an IPv4 address; no top-level
// domain is numeric.
func endsInNumber(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// imdsIPv6 is the instance metadata service's IPv6 endpoint on Nitro
// instances; its IPv4 endpoint, 169.254.169.254, is link-local.
var imdsIPv6 = netip.MustParseAddr("fd00:ec2::254")

// forbiddenAddr says why a reaches this instance or its metadata service
// (and with it the instance role's credentials), or "" if it does not.
func forbiddenAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsLinkLocalUnicast():
		return "a link-local address (the instance metadata service is 169.254.169.254)"
	case a.IsUnspecified(), a.Is4() && a.As4()[0] == 0:
		return "an unspecified address (it reaches this host)"
	case a == imdsIPv6:
		return "the instance metadata service"
	}
	return ""
}

// ValidateHost normalises a host and applies Validate's host checks alone,
// for callers that have a host but no task (a dry-run decision).
func (v *Validator) ValidateHost(host string) (string, error) {
	h, err := NormalizeHost(host)
	if err != nil {
		return "", err
	}
	if err := v.checkHost(h); err != nil {
		return "", err
	}
	return h, nil
}

// checkHost applies the forbidden targets, then the allow-list, to a
// normalised host.
func (v *Validator) checkHost(h string) error {
	if err := v.checkTarget(h); err != nil {
		return err
	}
	for _, re := range v.Allow {
		if re.MatchString(h) {
			return nil
		}
	}
	return reject(ReasonHostNotAllowed, "host", "%q matches no pattern of limiter.hosts.allow", h)
}

// checkTarget rejects a normalised host that names this instance or its
// metadata service whatever the configuration says, and an IP literal
// unless the operator allows them.
func (v *Validator) checkTarget(h string) error {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return reject(ReasonHostForbidden, "host", "%q names this host", h)
	}
	if urlcheck.MetadataHost(h) {
		// The platform's resolver answers these with the metadata
		// service's link-local address, which the address check below
		// never sees.
		return reject(ReasonHostForbidden, "host", "%q names the instance metadata service", h)
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return nil
	}
	if why := forbiddenAddr(a); why != "" {
		return reject(ReasonHostForbidden, "host", "%s is %s", h, why)
	}
	if !v.AllowIPLiterals && (v.OwnedAddr == nil || !v.OwnedAddr(h)) {
		return reject(ReasonIPLiteral, "host", "%s is an IP literal and limiter.hosts.allow_ip_literals is off", h)
	}
	return nil
}

// Spec is what the validator knows of one catalog diagnostic.
type Spec struct {
	// Params maps each accepted parameter to its compiled pattern; compile
	// catalog patterns with FullMatch so they match whole values.
	Params map[string]*regexp.Regexp
	// Required lists the parameters the command references.
	Required []string
	// AnyCharset names the parameters whose catalog entry says
	// `charset: any`: their values may hold more than ParamCharset.
	AnyCharset map[string]bool
}

// ParamCharset is what a parameter's value may hold unless its catalog
// entry says `charset: any`: letters, digits and . _ : @ / % + = , -.
// Enough for paths, units, hosts, addresses, sizes and lists; nothing a
// shell, a program text or an option string gives meaning to (space,
// quotes, ; | & $ ` ( ) < > { } [ ] * ? ! ~ # \ and newlines). The
// catalog pattern narrows it further.
const ParamCharset = `[A-Za-z0-9._:@/%+=,-]`

var paramCharset = regexp.MustCompile(`^` + ParamCharset + `*$`)

// Validator checks tasks against the allow-list and the catalog.
type Validator struct {
	// Allow is the host allow-list; a host must match one pattern. An empty
	// list allows no host.
	Allow []*regexp.Regexp
	// Catalog maps diagnostic names to their specs.
	Catalog map[string]Spec
	// MaxAge: tasks created longer ago end as stale (0 = no limit).
	MaxAge time.Duration
	// OriginKey verifies the origin token of a task of origin
	// "investigation"; such a task without a token that verifies under it
	// is rejected (invalid_origin). Nil rejects every such task.
	OriginKey []byte
	// AllowIPLiterals accepts a host that is an IPv4 address in dotted-quad
	// form (it still has to match Allow). The zero value rejects every IP
	// literal. Loopback, link-local (which holds the instance metadata
	// service), unspecified addresses and localhost are rejected either
	// way: a catalog entry that connects to its host must not reach this
	// instance's credentials.
	AllowIPLiterals bool
	// OwnedAddr, when set, reports whether an agent of the fleet answers
	// for an IP literal (one of its private addresses): such a host is
	// accepted whatever AllowIPLiterals says, since a host-local
	// diagnostic of it runs on that agent, never against the address.
	// The forbidden addresses stay forbidden.
	OwnedAddr func(h string) bool
}

// MaxFutureSkew is how far in the future a task's created_at may lie, for
// clock skew between the sender and this instance; further out, a task
// would stay clear of MaxAge as long as it liked.
const MaxFutureSkew = 5 * time.Minute

// Validate normalises t in place and checks it; the host comes first so
// that an invalid or forbidden host is rejected before anything else is
// looked at. now is the decision time for staleness.
func (v *Validator) Validate(t *Task, now time.Time) error {
	h, err := NormalizeHost(t.Host)
	if err != nil {
		return err
	}
	t.Host = h
	if err := v.checkHost(h); err != nil {
		return err
	}
	if t.ID != "" && !idPattern.MatchString(t.ID) {
		return reject(ReasonInvalidID, "id", "must match %s", idPattern)
	}
	if t.Diagnostic == "" {
		return reject(ReasonMissingDiagnostic, "diagnostic", "empty")
	}
	spec, ok := v.Catalog[t.Diagnostic]
	if !ok {
		return reject(ReasonUnknownDiagnostic, "diagnostic", "%q is not in the catalog (%s)", truncate(t.Diagnostic, 64), catalogNames(v.Catalog))
	}
	for name, val := range t.Params {
		re, ok := spec.Params[name]
		if !ok {
			return reject(ReasonUnknownParam, "params."+truncate(name, 64), "not accepted by %s", t.Diagnostic)
		}
		if err := checkParam(name, val, re, spec.AnyCharset[name]); err != nil {
			return err
		}
	}
	for _, name := range spec.Required {
		if _, ok := t.Params[name]; !ok {
			return reject(ReasonMissingParam, "params."+name, "required by %s", t.Diagnostic)
		}
	}
	if t.Severity != "" {
		t.Severity = strings.ToLower(t.Severity)
		if !severityPattern.MatchString(t.Severity) {
			return reject(ReasonInvalidSeverity, "severity", "must match %s", severityPattern)
		}
	}
	for _, f := range [...]struct{ field, val string }{{"alert.source", t.Alert.Source}, {"alert.name", t.Alert.Name}, {"alert.event_id", t.Alert.EventID}} {
		if len(f.val) > maxAlertLen || strings.ContainsFunc(f.val, isControl) {
			return reject(ReasonInvalidAlert, f.field, "longer than %d or holds control characters", maxAlertLen)
		}
	}
	for i, v := range t.Alert.Refs.Values() {
		if len(v) > maxAlertLen || strings.ContainsFunc(v, isControl) {
			return reject(ReasonInvalidAlert, "alert.refs."+taskview.RefNames[i], "longer than %d or holds control characters", maxAlertLen)
		}
	}
	if t.Origin != "" && t.Origin != OriginInvestigation || t.Step < 0 || t.Step > 20 ||
		!validOptionalID(t.Parent) || !validOptionalID(t.Investigation) {
		return reject(ReasonInvalidOrigin, "origin", "origin must be empty or %q, parent and investigation ids, step 0..20", OriginInvestigation)
	}
	if t.Origin == OriginInvestigation && !verifyOrigin(v.OriginKey, t) {
		return reject(ReasonInvalidOrigin, "origin_token", "origin %q is the agent's own investigator's: the task carries no origin token that verifies", OriginInvestigation)
	}
	if t.Origin == "" {
		// A token proves nothing without the origin it signs.
		t.OriginToken = ""
	}
	if t.CreatedAt.Sub(now) > MaxFutureSkew {
		return reject(ReasonInvalidCreatedAt, "created_at", "%s is more than %s in the future", t.CreatedAt.Format(time.RFC3339), MaxFutureSkew)
	}
	if v.MaxAge > 0 && !t.CreatedAt.IsZero() && now.Sub(t.CreatedAt) > v.MaxAge {
		return reject(ReasonStale, "created_at", "created %s ago, older than queue.max_age %s", now.Sub(t.CreatedAt).Round(time.Second), v.MaxAge)
	}
	return nil
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// checkParam: the catalog pattern must match the whole value; on top of
// it, values are bounded, free of control characters and never start with
// '-', so no value can be taken for an option by the program it is passed
// to, whatever the pattern says.
func checkParam(name, val string, re *regexp.Regexp, anyCharset bool) error {
	field := "params." + name
	switch {
	case len(val) > maxParamLen:
		return reject(ReasonInvalidParam, field, "longer than %d bytes", maxParamLen)
	case strings.ContainsFunc(val, isControl):
		return reject(ReasonInvalidParam, field, "holds control characters")
	case strings.HasPrefix(val, "-"):
		return reject(ReasonInvalidParam, field, "must not start with '-'")
	case !anyCharset && !paramCharset.MatchString(val):
		return reject(ReasonInvalidParam, field, "holds a character outside %s (the catalog entry can lift this with charset: {%s: any})", ParamCharset, name)
	}
	if !re.MatchString(val) {
		return reject(ReasonInvalidParam, field, "does not match %s", re)
	}
	return nil
}

// FullMatch compiles pattern so that it must match a whole value.
func FullMatch(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

// truncate cuts s to at most n bytes on a rune boundary, so the result
// stays valid UTF-8 (SQS refuses attributes that are not).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return utf8cut.Head(s, n) + "…"
}

// OriginInvestigation is the origin of a root-cause investigation's tool
// calls, which limiter rules can match (match.origin).
const OriginInvestigation = "investigation"

func validOptionalID(id string) bool { return id == "" || idPattern.MatchString(id) }
