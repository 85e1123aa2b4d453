package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// sqsSize is a message's size as SQS counts it against MaximumMessageSize.
func sqsSize(v sqsfake.MessageView) int {
	n := len(v.Body)
	for k, a := range v.Attributes {
		n += len(k) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return n
}

// sends counts SendMessage requests to the named queue.
func (f *fixture) sends(name string) int {
	n := 0
	for _, c := range f.srv.Calls("SendMessage") {
		if c.Queue == name {
			n++
		}
	}
	return n
}

func (f *fixture) setAttrs(tb testing.TB, url string, attrs map[string]string) {
	tb.Helper()
	if _, err := f.client.SetQueueAttributes(tb.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs}); err != nil {
		tb.Fatalf("SetQueueAttributes: %v", err)
	}
}

// TestSQSDeadLetterFits: whatever the body and attributes, exactly one DLQ
// copy is sent, it fits the DLQ's MaximumMessageSize with the reason, and
// the original is deleted. Copied attributes give way first, then the body
// is cut on a rune boundary with its original size in TruncatedAttribute.
func TestSQSDeadLetterFits(t *testing.T) {
	attrs := map[string]string{}
	for i := range 5 {
		attrs[fmt.Sprintf("a%d", i)] = strings.Repeat(strconv.Itoa(i), 200+i) // a4 is the largest
	}
	const attrBytes = 5*(2+6+200) + 0 + 1 + 2 + 3 + 4
	reason := "malformed: " + strings.Repeat("r", 150) // its attribute is smaller than a4
	tests := []struct {
		name      string
		dlqSize   int // 0 = SQS's default
		taskSize  int
		body      string
		attrs     map[string]string
		wantAttrs []string // copied attributes expected on the DLQ copy
		truncated bool
	}{
		{"small fits whole", 0, 0, `{"broken`, attrs, []string{"a0", "a1", "a2", "a3", "a4"}, false},
		{"near 256 KiB drops the largest attribute", 0, 0, strings.Repeat("x", 262144-attrBytes), attrs,
			[]string{"a0", "a1", "a2", "a3"}, false},
		{"full 256 KiB body is cut", 0, 0, strings.Repeat("x", 262144), nil, nil, true},
		{"multi-byte body is cut on a rune boundary", 0, 0, strings.Repeat("é", 131072), nil, nil, true},
		{"near 256 KiB with attributes into a 1 MiB DLQ", 1048576, 0, strings.Repeat("x", 262144-attrBytes), attrs,
			[]string{"a0", "a1", "a2", "a3", "a4"}, false},
		{"1 MiB task queue into a 256 KiB DLQ", 0, 1048576, strings.Repeat("y", 1048576-attrBytes), attrs, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			if tc.dlqSize != 0 {
				f.setAttrs(t, f.dlqURL, map[string]string{"MaximumMessageSize": strconv.Itoa(tc.dlqSize)})
			}
			if tc.taskSize != 0 {
				f.setAttrs(t, f.url, map[string]string{"MaximumMessageSize": strconv.Itoa(tc.taskSize)})
			}
			limit := max(tc.dlqSize, 262144)
			q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
			defer q.Close(ctx)
			f.send(t, tc.body, tc.attrs)
			m := receiveN(t, q, 1)[0]
			if err := q.DeadLetter(ctx, m, reason); err != nil {
				t.Fatalf("DeadLetter: %v", err)
			}
			if v, _ := f.srv.Queue("tasks"); !v.Empty() || v.Stats.Deleted != 1 {
				t.Errorf("task queue after DeadLetter: %+v, want the original deleted", v.Stats)
			}
			if n := f.sends("tasks-dlq"); n != 1 {
				t.Errorf("%d SendMessage calls, want exactly one DLQ send", n)
			}
			v, _ := f.srv.Queue("tasks-dlq")
			if len(v.Messages) != 1 {
				t.Fatalf("DLQ holds %d messages, want 1", len(v.Messages))
			}
			dm := v.Messages[0]
			if size := sqsSize(dm); size > limit {
				t.Errorf("DLQ copy is %d bytes, over the DLQ's %d", size, limit)
			}
			if got := dm.Attributes[queue.RejectReasonAttribute].StringValue; got != reason {
				t.Errorf("reason = %.40q…, want %.40q…", got, reason)
			}
			for _, k := range tc.wantAttrs {
				if dm.Attributes[k].StringValue != tc.attrs[k] {
					t.Errorf("attribute %s not copied", k)
				}
			}
			wantN := len(tc.wantAttrs) + 1
			if tc.truncated {
				wantN++
			}
			if len(dm.Attributes) != wantN {
				t.Errorf("DLQ copy has %d attributes, want %d", len(dm.Attributes), wantN)
			}
			tr, cut := dm.Attributes[queue.TruncatedAttribute]
			switch {
			case !tc.truncated && (cut || dm.Body != tc.body):
				t.Errorf("body cut to %d of %d bytes (marker %+v), want it whole", len(dm.Body), len(tc.body), tr)
			case tc.truncated && (!cut || tr.DataType != "Number" || tr.StringValue != strconv.Itoa(len(tc.body))):
				t.Errorf("truncation marker = %+v, want Number %d", tr, len(tc.body))
			case tc.truncated && (!strings.HasPrefix(tc.body, dm.Body) || !utf8.ValidString(dm.Body) || limit-sqsSize(dm) > utf8.UTFMax):
				t.Errorf("cut body: %d bytes, valid UTF-8 %v, %d bytes of the limit unused; want the longest valid prefix that fits",
					len(dm.Body), utf8.ValidString(dm.Body), limit-sqsSize(dm))
			}
		})
	}
}

// TestSQSDeadLetterRetries: a DLQ send that fails past the SDK's retries is
// tried again with backoff; one that keeps failing returns an error after
// a bounded number of sends and leaves the message in the source.
func TestSQSDeadLetterRetries(t *testing.T) {
	oneAttempt := func(o *sqs.Options) { o.RetryMaxAttempts = 1 }
	t.Run("transient", func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, oneAttempt)
		q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
		defer q.Close(ctx)
		f.send(t, "bad", nil)
		m := receiveN(t, q, 1)[0]
		f.srv.InjectFault(sqsfake.Fault{Op: "SendMessage", Queue: "tasks-dlq", Kind: sqsfake.FaultServerError, Count: 2})
		if err := q.DeadLetter(ctx, m, "malformed"); err != nil {
			t.Fatalf("DeadLetter = %v, want success on the third send", err)
		}
		if n := f.sends("tasks-dlq"); n != 3 {
			t.Errorf("%d SendMessage calls, want 3", n)
		}
		if v, _ := f.srv.Queue("tasks-dlq"); len(v.Messages) != 1 {
			t.Errorf("DLQ holds %d messages, want 1", len(v.Messages))
		}
	})
	t.Run("persistent", func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, oneAttempt)
		q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
		defer q.Close(ctx)
		f.send(t, "bad", nil)
		m := receiveN(t, q, 1)[0]
		f.srv.InjectFault(sqsfake.Fault{Op: "SendMessage", Queue: "tasks-dlq", Kind: sqsfake.FaultServerError})
		err := q.DeadLetter(ctx, m, "malformed")
		if err == nil || errors.Is(err, queue.ErrNoDeadLetter) {
			t.Fatalf("DeadLetter = %v, want the send's error", err)
		}
		if n := f.sends("tasks-dlq"); n != queue.DeadLetterAttempts {
			t.Errorf("%d SendMessage calls, want the bound %d", n, queue.DeadLetterAttempts)
		}
		if v, _ := f.srv.Queue("tasks"); v.InFlight != 1 || v.Stats.Deleted != 0 {
			t.Errorf("task queue: %+v, want the message left in flight", v.Stats)
		}
	})
}
