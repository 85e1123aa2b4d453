package tracing

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP request is written straight into a byte slice with protowire,
// field by field as opentelemetry-proto's trace.proto, common.proto and
// resource.proto number them: building the generated message types and
// marshalling them by reflection cost ten allocations and a microsecond
// per span, on the agent's CPUs (BenchmarkExport). The test receiver
// (internal/otlpfake) decodes with the generated types, which checks the
// encoding against them.

// ExportTraceServiceRequest / ResourceSpans / ScopeSpans fields.
const (
	fieldResourceSpans = 1 // ExportTraceServiceRequest.resource_spans
	fieldResource      = 1 // ResourceSpans.resource
	fieldScopeSpans    = 2 // ResourceSpans.scope_spans
	fieldScope         = 1 // ScopeSpans.scope
	fieldSpans         = 2 // ScopeSpans.spans
	fieldSchemaURL     = 3 // ScopeSpans.schema_url
	fieldAttributes    = 1 // Resource.attributes
	fieldScopeName     = 1 // InstrumentationScope.name
	fieldScopeVersion  = 2 // InstrumentationScope.version
)

// Span fields.
const (
	fieldTraceID         = 1
	fieldSpanID          = 2
	fieldTraceState      = 3
	fieldParentSpanID    = 4
	fieldName            = 5
	fieldKind            = 6
	fieldStart           = 7
	fieldEnd             = 8
	fieldSpanAttributes  = 9
	fieldDroppedAttrs    = 10
	fieldEvents          = 11
	fieldDroppedEvents   = 12
	fieldLinks           = 13
	fieldDroppedLinks    = 14
	fieldStatus          = 15
	fieldFlags           = 16
	fieldEventTime       = 1 // Span.Event
	fieldEventName       = 2
	fieldEventAttributes = 3
	fieldEventDropped    = 4
	fieldLinkTraceID     = 1 // Span.Link
	fieldLinkSpanID      = 2
	fieldLinkTraceState  = 3
	fieldLinkAttributes  = 4
	fieldLinkDropped     = 5
	fieldLinkFlags       = 6
	fieldStatusMessage   = 2 // Status
	fieldStatusCode      = 3
	statusCodeOK         = 1
	statusCodeError      = 2
)

// KeyValue / AnyValue / ArrayValue fields.
const (
	fieldKey         = 1
	fieldValue       = 2
	fieldString      = 1
	fieldBool        = 2
	fieldInt         = 3
	fieldDouble      = 4
	fieldArray       = 5
	fieldArrayValues = 1
)

// appendMsg appends field num holding the message f appends: f writes
// after the tag, then the bytes are moved right by the length's size and
// the length written before them.
func appendMsg(b []byte, num protowire.Number, f func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	start := len(b)
	b = f(b)
	n := len(b) - start
	s := protowire.SizeVarint(uint64(n))
	for range s {
		b = append(b, 0)
	}
	copy(b[start+s:], b[start:start+n])
	protowire.AppendVarint(b[start:start], uint64(n))
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

// encodeResource is a Resource message's content: its attributes.
func encodeResource(kvs []attribute.KeyValue) []byte {
	return appendAttrs(nil, fieldAttributes, kvs)
}

// appendRequest appends the ExportTraceServiceRequest of spans: one
// ResourceSpans (resource, the Resource's encoded content) with a
// ScopeSpans per instrumentation scope, in the order the scopes first
// appear.
func appendRequest(b []byte, resource []byte, spans []sdktrace.ReadOnlySpan) []byte {
	return appendMsg(b, fieldResourceSpans, func(b []byte) []byte {
		b = appendBytes(b, fieldResource, resource)
		for i, s := range spans {
			sc := s.InstrumentationScope()
			if seenBefore(spans[:i], sc.Name, sc.Version) {
				continue
			}
			b = appendMsg(b, fieldScopeSpans, func(b []byte) []byte {
				b = appendMsg(b, fieldScope, func(b []byte) []byte {
					b = appendString(b, fieldScopeName, sc.Name)
					if sc.Version != "" {
						b = appendString(b, fieldScopeVersion, sc.Version)
					}
					return b
				})
				for _, o := range spans[i:] {
					if os := o.InstrumentationScope(); os.Name == sc.Name && os.Version == sc.Version {
						b = appendMsg(b, fieldSpans, func(b []byte) []byte { return appendSpan(b, o) })
					}
				}
				if sc.SchemaURL != "" {
					b = appendString(b, fieldSchemaURL, sc.SchemaURL)
				}
				return b
			})
		}
		return b
	})
}

// seenBefore: a span of scope name/version is among spans (its ScopeSpans
// is written already). The spans of a batch have one scope or a few.
func seenBefore(spans []sdktrace.ReadOnlySpan, name, version string) bool {
	for _, s := range spans {
		if sc := s.InstrumentationScope(); sc.Name == name && sc.Version == version {
			return true
		}
	}
	return false
}

// appendSpan appends a Span message's content.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fieldTraceID, tid[:])
	b = appendBytes(b, fieldSpanID, sid[:])
	if ts := sc.TraceState().String(); ts != "" {
		b = appendString(b, fieldTraceState, ts)
	}
	parent := s.Parent()
	if parent.IsValid() {
		psid := parent.SpanID()
		b = appendBytes(b, fieldParentSpanID, psid[:])
	}
	b = appendString(b, fieldName, s.Name())
	if k := s.SpanKind(); k != trace.SpanKindUnspecified {
		b = appendVarint(b, fieldKind, uint64(k)) // the same numbers: internal 1 … consumer 5
	}
	b = appendFixed64(b, fieldStart, uint64(s.StartTime().UnixNano()))
	b = appendFixed64(b, fieldEnd, uint64(s.EndTime().UnixNano()))
	b = appendAttrs(b, fieldSpanAttributes, s.Attributes())
	if n := s.DroppedAttributes(); n > 0 {
		b = appendVarint(b, fieldDroppedAttrs, uint64(n))
	}
	for _, ev := range s.Events() {
		b = appendMsg(b, fieldEvents, func(b []byte) []byte {
			b = appendFixed64(b, fieldEventTime, uint64(ev.Time.UnixNano()))
			b = appendString(b, fieldEventName, ev.Name)
			b = appendAttrs(b, fieldEventAttributes, ev.Attributes)
			if ev.DroppedAttributeCount > 0 {
				b = appendVarint(b, fieldEventDropped, uint64(ev.DroppedAttributeCount))
			}
			return b
		})
	}
	if n := s.DroppedEvents(); n > 0 {
		b = appendVarint(b, fieldDroppedEvents, uint64(n))
	}
	for _, l := range s.Links() {
		b = appendMsg(b, fieldLinks, func(b []byte) []byte {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, fieldLinkTraceID, ltid[:])
			b = appendBytes(b, fieldLinkSpanID, lsid[:])
			if ts := l.SpanContext.TraceState().String(); ts != "" {
				b = appendString(b, fieldLinkTraceState, ts)
			}
			b = appendAttrs(b, fieldLinkAttributes, l.Attributes)
			if l.DroppedAttributeCount > 0 {
				b = appendVarint(b, fieldLinkDropped, uint64(l.DroppedAttributeCount))
			}
			return appendFixed32(b, fieldLinkFlags, uint32(l.SpanContext.TraceFlags())|remoteFlags(l.SpanContext))
		})
	}
	if n := s.DroppedLinks(); n > 0 {
		b = appendVarint(b, fieldDroppedLinks, uint64(n))
	}
	switch st := s.Status(); st.Code {
	case codes.Error:
		b = appendMsg(b, fieldStatus, func(b []byte) []byte {
			if st.Description != "" {
				b = appendString(b, fieldStatusMessage, st.Description)
			}
			return appendVarint(b, fieldStatusCode, statusCodeError)
		})
	case codes.Ok:
		b = appendMsg(b, fieldStatus, func(b []byte) []byte { return appendVarint(b, fieldStatusCode, statusCodeOK) })
	}
	return appendFixed32(b, fieldFlags, uint32(sc.TraceFlags())|remoteFlags(parent))
}

// remoteFlags are the OTLP span flags' "has is_remote" bit (0x100) and,
// for a remote parent or link, "is_remote" (0x200).
func remoteFlags(sc trace.SpanContext) uint32 {
	if sc.IsValid() && sc.IsRemote() {
		return 0x300
	}
	return 0x100
}

// appendAttrs appends each attribute as a KeyValue in field num.
func appendAttrs(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMsg(b, num, func(b []byte) []byte {
			b = appendString(b, fieldKey, string(kv.Key))
			return appendMsg(b, fieldValue, func(b []byte) []byte { return appendValue(b, kv.Value) })
		})
	}
	return b
}

// appendValue appends an AnyValue message's content (its one field).
func appendValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		var n uint64
		if v.AsBool() {
			n = 1
		}
		return appendVarint(b, fieldBool, n)
	case attribute.INT64:
		return appendVarint(b, fieldInt, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return appendFixed64(b, fieldDouble, math.Float64bits(v.AsFloat64()))
	case attribute.STRINGSLICE:
		return appendMsg(b, fieldArray, func(b []byte) []byte {
			for _, s := range v.AsStringSlice() {
				b = appendMsg(b, fieldArrayValues, func(b []byte) []byte { return appendString(b, fieldString, s) })
			}
			return b
		})
	case attribute.INT64SLICE:
		return appendMsg(b, fieldArray, func(b []byte) []byte {
			for _, n := range v.AsInt64Slice() {
				b = appendMsg(b, fieldArrayValues, func(b []byte) []byte { return appendVarint(b, fieldInt, uint64(n)) })
			}
			return b
		})
	case attribute.STRING:
		return appendString(b, fieldString, v.AsString())
	default: // bool and float slices: their text
		return appendString(b, fieldString, v.String())
	}
}
