package tracing

import (
	"context"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// The message attributes and system attribute the SQS carrier uses. The
// agent sets at most four attributes of its own (queue.*Attribute) on a
// message it re-sends; these add two, within SQS's ten.
const (
	AttrTraceparent = "traceparent"
	AttrTracestate  = "tracestate"
	// AWSTraceHeader is SQS's system attribute for an X-Ray trace header
	// (Root=1-…;Parent=…;Sampled=1), set by producers instrumented with
	// X-Ray or by SNS; it is read when no traceparent is set.
	AWSTraceHeader = "AWSTraceHeader"
)

// Inject writes ctx's span context as traceparent (and tracestate when
// set) through set; nothing when ctx has no valid span context.
func Inject(ctx context.Context, set func(key, value string)) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	set(AttrTraceparent, Traceparent(sc))
	if ts := sc.TraceState().String(); ts != "" {
		set(AttrTracestate, ts)
	}
}

// Traceparent formats sc as a W3C traceparent header.
func Traceparent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// Parent is what a carrier held: a remote span context, or why not.
type Parent struct {
	SC trace.SpanContext
	// Malformed is true when a traceparent or AWSTraceHeader was present
	// but could not be read; it is ignored and the task gets a new trace.
	Malformed bool
}

// Extract reads a parent from a traceparent (with its tracestate) or,
// failing that, an X-Ray header. Either may be "".
func Extract(traceparent, tracestate, xray string) Parent {
	if traceparent != "" {
		sc, ok := ParseTraceparent(traceparent)
		if !ok {
			return Parent{Malformed: true}
		}
		if tracestate != "" {
			if ts, err := trace.ParseTraceState(tracestate); err == nil {
				sc = sc.WithTraceState(ts)
			}
		}
		return Parent{SC: sc}
	}
	if xray != "" {
		sc, ok, malformed := parseXRay(xray)
		if !ok {
			return Parent{Malformed: malformed}
		}
		return Parent{SC: sc}
	}
	return Parent{}
}

// ParseTraceparent reads a W3C traceparent: version 00 exactly, a later
// version by its first four fields; all-zero ids and version ff are
// invalid.
func ParseTraceparent(s string) (trace.SpanContext, bool) {
	s = strings.TrimSpace(s)
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	if _, err := hex.Decode(ver[:], []byte(s[:2])); err != nil || ver[0] == 0xff || !lowerHex(s[:55]) {
		return trace.SpanContext{}, false
	}
	if ver[0] == 0 && len(s) != 55 || ver[0] > 0 && len(s) > 55 && s[55] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if _, err := hex.Decode(tid[:], []byte(s[3:35])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(sid[:], []byte(s[36:52])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// lowerHex: the W3C format allows lowercase hex (and dashes) only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseXRay reads an X-Ray trace header, Root=1-{8 hex}-{24 hex};
// Parent={16 hex};Sampled=0|1 (any order, other fields ignored). A header
// with a Root but no Parent names no span to continue: not ok, not
// malformed.
func parseXRay(h string) (sc trace.SpanContext, ok, malformed bool) {
	var root, parent, sampled string
	for _, f := range strings.Split(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "Root":
			root = v
		case "Parent":
			parent = v
		case "Sampled":
			sampled = v
		}
	}
	if root == "" {
		return sc, false, true
	}
	ver, epoch, rest, _ := cut3(root)
	if ver != "1" || len(epoch) != 8 || len(rest) != 24 {
		return sc, false, true
	}
	if parent == "" {
		return sc, false, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	if _, err := hex.Decode(tid[:], []byte(epoch+rest)); err != nil {
		return sc, false, true
	}
	if len(parent) != 16 {
		return sc, false, true
	}
	if _, err := hex.Decode(sid[:], []byte(parent)); err != nil {
		return sc, false, true
	}
	var flags trace.TraceFlags
	if sampled == "1" {
		flags = trace.FlagsSampled
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	return sc, sc.IsValid(), !sc.IsValid()
}

func cut3(s string) (a, b, c string, ok bool) {
	a, rest, ok1 := strings.Cut(s, "-")
	b, c, ok2 := strings.Cut(rest, "-")
	return a, b, c, ok1 && ok2
}
