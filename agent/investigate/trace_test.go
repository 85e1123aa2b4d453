package investigate

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
)

// TestToolSpanRanOn: an execute_tool span of a call that ran names the
// agent that ran it; a refused call's names none.
func TestToolSpanRanOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		call report.Call
		want map[string]string
	}{
		{"ran", report.Call{Tool: "journal", Result: ResultRan, TaskID: "inv-1-s1-c1",
			RanOn: &taskview.RanOn{InstanceID: "i-0abc", Hostname: "ip-10-0-1-5"}},
			map[string]string{"autodiag.ran_on.instance_id": "i-0abc", "autodiag.ran_on.hostname": "ip-10-0-1-5"}},
		{"rate limited", report.Call{Tool: "journal", Result: "rate_limited", TaskID: "inv-1-s1-c2"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			_, span := tp.Tracer("test").Start(context.Background(), "execute_tool")
			endTool(span, tc.call)
			ended := rec.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans ended, want 1", len(ended))
			}
			got := map[string]string{}
			for _, kv := range ended[0].Attributes() {
				if k := string(kv.Key); k == "autodiag.ran_on.instance_id" || k == "autodiag.ran_on.hostname" {
					got[k] = kv.Value.AsString()
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ran_on attributes %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
