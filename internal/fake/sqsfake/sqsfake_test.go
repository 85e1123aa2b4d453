package sqsfake_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

type (
	sqsMessage = types.Message
	sqsSysName = types.MessageSystemAttributeName
)

// refAttrMD5 is an independent, byte-by-byte rendering of the algorithm in
// the SQS developer guide ("Calculating the MD5 message digest for message
// attributes"), used to check the server's MD5OfMessageAttributes for Number,
// Binary and custom types.
func refAttrMD5(attrs map[string]types.MessageAttributeValue) string {
	var names []string
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	lp := func(b []byte) {
		_ = binary.Write(&buf, binary.BigEndian, int32(len(b)))
		buf.Write(b)
	}
	for _, n := range names {
		a := attrs[n]
		lp([]byte(n))
		lp([]byte(aws.ToString(a.DataType)))
		if strings.HasPrefix(aws.ToString(a.DataType), "Binary") {
			buf.WriteByte(2)
			lp(a.BinaryValue)
		} else {
			buf.WriteByte(1)
			lp([]byte(aws.ToString(a.StringValue)))
		}
	}
	sum := md5.Sum(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

func TestMD5MatchesRealSQS(t *testing.T) {
	// Body and attribute digests from a real SQS ReceiveMessage response.
	if got := sqsfake.MD5OfBody("foobar2"); got != "cbac77acf401ef89c3297bd9fc41ec0b" {
		t.Errorf("MD5OfBody = %s", got)
	}
	got := sqsfake.MD5OfMessageAttributes(map[string]sqsfake.MessageAttribute{
		"AtTimestamp": {DataType: "String", StringValue: "2021-02-15T12:00:33+09:00"},
	})
	if got != "9fd5e217089075be61cd1d67e35e5117" {
		t.Errorf("MD5OfMessageAttributes = %s", got)
	}
	if got := sqsfake.MD5OfMessageAttributes(nil); got != "" {
		t.Errorf("MD5OfMessageAttributes(nil) = %q, want empty", got)
	}
}

func TestSendReceiveAttributesAndChecksums(t *testing.T) {
	e := newEnv(t)
	url := e.queue(t, "attrs", nil)
	tests := []struct {
		name  string
		body  string
		attrs map[string]types.MessageAttributeValue
	}{
		{"no attributes", `{"host":"a.example.com"}`, nil},
		{"unicode body", "ünïcødé ✓ \t\n\r 𝄞", nil},
		{"string", "b", map[string]types.MessageAttributeValue{
			"reason": {DataType: aws.String("String"), StringValue: aws.String("bad host")},
		}},
		{"number", "b", map[string]types.MessageAttributeValue{
			"attempt": {DataType: aws.String("Number"), StringValue: aws.String("3")},
			"ratio":   {DataType: aws.String("Number.float"), StringValue: aws.String("-1.5e3")},
		}},
		{"binary", "b", map[string]types.MessageAttributeValue{
			"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 0xff}},
		}},
		{"mixed custom", "b", map[string]types.MessageAttributeValue{
			"a.x":  {DataType: aws.String("String.json"), StringValue: aws.String(`{"k":1}`)},
			"b-y":  {DataType: aws.String("Binary.gz"), BinaryValue: []byte("zz")},
			"C_z9": {DataType: aws.String("Number"), StringValue: aws.String("42")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			sent, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String(tc.body), MessageAttributes: tc.attrs,
			})
			if err != nil { // the SDK validates MD5OfMessageBody here
				t.Fatalf("SendMessage: %v", err)
			}
			wantAttrMD5 := ""
			if len(tc.attrs) > 0 {
				wantAttrMD5 = refAttrMD5(tc.attrs)
			}
			if got := aws.ToString(sent.MD5OfMessageAttributes); got != wantAttrMD5 {
				t.Errorf("send MD5OfMessageAttributes = %q, want %q", got, wantAttrMD5)
			}
			out, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(url), MessageAttributeNames: []string{"All"},
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			})
			if err != nil { // the SDK validates MD5OfBody here
				t.Fatalf("ReceiveMessage: %v", err)
			}
			if len(out.Messages) != 1 {
				t.Fatalf("received %d messages, want 1", len(out.Messages))
			}
			m := out.Messages[0]
			if aws.ToString(m.Body) != tc.body || aws.ToString(m.MessageId) != aws.ToString(sent.MessageId) {
				t.Errorf("got body %q id %s, want %q id %s", aws.ToString(m.Body), aws.ToString(m.MessageId), tc.body, aws.ToString(sent.MessageId))
			}
			if got := aws.ToString(m.MD5OfMessageAttributes); got != wantAttrMD5 {
				t.Errorf("receive MD5OfMessageAttributes = %q, want %q", got, wantAttrMD5)
			}
			if len(m.MessageAttributes) != len(tc.attrs) {
				t.Errorf("got %d attributes, want %d", len(m.MessageAttributes), len(tc.attrs))
			}
			for k, want := range tc.attrs {
				got := m.MessageAttributes[k]
				if aws.ToString(got.DataType) != aws.ToString(want.DataType) || aws.ToString(got.StringValue) != aws.ToString(want.StringValue) || !bytes.Equal(got.BinaryValue, want.BinaryValue) {
					t.Errorf("attribute %s = %+v, want %+v", k, got, want)
				}
			}
			if m.Attributes["ApproximateReceiveCount"] != "1" ||
				m.Attributes["SentTimestamp"] != strconv.FormatInt(epoch.UnixMilli(), 10) ||
				m.Attributes["ApproximateFirstReceiveTimestamp"] != strconv.FormatInt(epoch.UnixMilli(), 10) ||
				m.Attributes["SenderId"] != "AKID" {
				t.Errorf("system attributes = %v", m.Attributes)
			}
			if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		})
	}
	v, _ := e.srv.Queue("attrs")
	if !v.Empty() || v.Stats.Deleted != len(tests) {
		t.Errorf("queue not drained: %+v", v.Stats)
	}
}

func TestMessageAttributeNamesFilter(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "filter", map[string]string{"VisibilityTimeout": "0"})
	attrs := map[string]types.MessageAttributeValue{
		"task.id":   {DataType: aws.String("String"), StringValue: aws.String("1")},
		"task.host": {DataType: aws.String("String"), StringValue: aws.String("h")},
		"other":     {DataType: aws.String("Number"), StringValue: aws.String("7")},
	}
	if _, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		names []string
		want  []string
	}{
		{nil, nil},
		{[]string{"All"}, []string{"other", "task.host", "task.id"}},
		{[]string{".*"}, []string{"other", "task.host", "task.id"}},
		{[]string{"task.*"}, []string{"task.host", "task.id"}},
		{[]string{"other", "missing"}, []string{"other"}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.names), func(t *testing.T) {
			ctx := t.Context()
			out, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MessageAttributeNames: tc.names})
			if err != nil || len(out.Messages) != 1 {
				t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
			}
			m := out.Messages[0]
			var got []string
			sel := map[string]types.MessageAttributeValue{}
			for k := range m.MessageAttributes {
				got = append(got, k)
				sel[k] = attrs[k]
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("attributes %v, want %v", got, tc.want)
			}
			wantMD5 := ""
			if len(sel) > 0 {
				wantMD5 = refAttrMD5(sel) // SQS digests the attributes it returns
			}
			if aws.ToString(m.MD5OfMessageAttributes) != wantMD5 {
				t.Errorf("MD5OfMessageAttributes %q, want %q", aws.ToString(m.MD5OfMessageAttributes), wantMD5)
			}
		})
	}
}

func TestVisibilityTimeoutAndReceiptHandles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "vis", map[string]string{"VisibilityTimeout": "30"})
	id := e.send(t, url, "task")

	first := e.receive(t, url, 10)
	if len(first) != 1 || first[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("first receive: %+v", first)
	}
	if got := e.receive(t, url, 10); len(got) != 0 {
		t.Fatalf("in-flight message received again: %d", len(got))
	}
	if v, _ := e.srv.Queue("vis"); v.Visible != 0 || v.InFlight != 1 {
		t.Fatalf("visible %d in flight %d, want 0/1", v.Visible, v.InFlight)
	}
	e.clock.Advance(29 * time.Second)
	if got := e.receive(t, url, 10); len(got) != 0 {
		t.Fatalf("received before the visibility timeout lapsed")
	}
	e.clock.Advance(time.Second)
	second := e.receive(t, url, 10)
	if len(second) != 1 || aws.ToString(second[0].MessageId) != id {
		t.Fatalf("second receive: %+v", second)
	}
	if second[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Errorf("receive count %s, want 2", second[0].Attributes["ApproximateReceiveCount"])
	}
	if second[0].Attributes["ApproximateFirstReceiveTimestamp"] != strconv.FormatInt(epoch.UnixMilli(), 10) {
		t.Errorf("first receive timestamp changed: %s", second[0].Attributes["ApproximateFirstReceiveTimestamp"])
	}
	if aws.ToString(second[0].ReceiptHandle) == aws.ToString(first[0].ReceiptHandle) {
		t.Fatal("receipt handle did not change on the second receive")
	}

	// Stale handle: DeleteMessage succeeds and deletes nothing.
	if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatalf("stale DeleteMessage: %v", err)
	}
	v, _ := e.srv.Queue("vis")
	if v.InFlight != 1 || v.Stats.StaleDeletes != 1 || v.Stats.Deleted != 0 {
		t.Fatalf("after stale delete: in flight %d stats %+v", v.InFlight, v.Stats)
	}
	calls := e.srv.Calls("DeleteMessage")
	if len(calls) != 1 || calls[0].StaleDeletes != 1 || len(calls[0].MessageIDs) != 0 {
		t.Errorf("call log for stale delete: %+v", calls)
	}
	// Stale handle: ChangeMessageVisibility fails.
	_, err := e.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 60})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterValue" {
		t.Fatalf("stale ChangeMessageVisibility error = %v, want InvalidParameterValue", err)
	}
	// Current handle deletes.
	if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: second[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	// Deleting again (message gone) succeeds, as in SQS.
	if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: second[0].ReceiptHandle}); err != nil {
		t.Fatalf("repeated DeleteMessage: %v", err)
	}
	v, _ = e.srv.Queue("vis")
	if !v.Empty() || v.Stats.Deleted != 1 || len(v.History) != 1 || v.History[0].State != "deleted" || v.History[0].ReceiveCount != 2 {
		t.Fatalf("after delete: %+v", v)
	}
}

func TestReceiveVisibilityTimeoutOverride(t *testing.T) {
	e := newEnv(t)
	url := e.queue(t, "override", map[string]string{"VisibilityTimeout": "300"})
	e.send(t, url, "x")
	out, err := e.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), VisibilityTimeout: 5})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	e.clock.Advance(5 * time.Second)
	if got := e.receive(t, url, 1); len(got) != 1 {
		t.Fatalf("message not visible after the 5 s override")
	}
}

func TestChangeMessageVisibility(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(e *env) // after the receive at epoch
		vt      int32
		handle  func(h string) string
		check   func(t *testing.T, err error)
	}{
		{
			name: "zero makes visible at once", vt: 0,
			check: func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "garbage handle", vt: 10, handle: func(string) string { return "not-a-handle" },
			check: func(t *testing.T, err error) {
				var target *types.ReceiptHandleIsInvalid
				if !errors.As(err, &target) {
					t.Fatalf("err = %v, want ReceiptHandleIsInvalid", err)
				}
			},
		},
		{
			name: "visibility already lapsed", vt: 10, prepare: func(e *env) { e.clock.Advance(31 * time.Second) },
			check: func(t *testing.T, err error) {
				var target *types.MessageNotInflight
				if !errors.As(err, &target) || target.ErrorCode() != "AWS.SimpleQueueService.MessageNotInflight" {
					t.Fatalf("err = %v, want MessageNotInflight", err)
				}
			},
		},
		{
			name: "above 43200", vt: 43201,
			check: func(t *testing.T, err error) {
				var api smithy.APIError
				if !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterValue" {
					t.Fatalf("err = %v, want InvalidParameterValue", err)
				}
			},
		},
		{
			name: "total beyond 12 h from the receive", vt: 43200, prepare: func(e *env) { e.clock.Advance(20 * time.Second) },
			check: func(t *testing.T, err error) {
				var api smithy.APIError
				if !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterValue" {
					t.Fatalf("err = %v, want InvalidParameterValue", err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newEnv(t)
			url := e.queue(t, "cmv", map[string]string{"VisibilityTimeout": "30"})
			e.send(t, url, "x")
			got := e.receive(t, url, 1)
			if len(got) != 1 {
				t.Fatal("no message")
			}
			if tc.prepare != nil {
				tc.prepare(e)
			}
			h := aws.ToString(got[0].ReceiptHandle)
			if tc.handle != nil {
				h = tc.handle(h)
			}
			_, err := e.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(h), VisibilityTimeout: tc.vt})
			tc.check(t, err)
		})
	}

	t.Run("extension outlives the original timeout", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "ext", map[string]string{"VisibilityTimeout": "30"})
		e.send(t, url, "x")
		got := e.receive(t, url, 1)
		e.clock.Advance(20 * time.Second)
		if _, err := e.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 60}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(59 * time.Second) // 79 s after the receive; the new timeout counts from the change
		if n := len(e.receive(t, url, 1)); n != 0 {
			t.Fatal("extended message redelivered early")
		}
		e.clock.Advance(time.Second)
		if n := len(e.receive(t, url, 1)); n != 1 {
			t.Fatal("message not visible after the extension lapsed")
		}
	})
}

func TestChangeMessageVisibilityBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "cmvb", nil)
	e.send(t, url, "a")
	e.send(t, url, "b")
	got := e.receive(t, url, 10)
	if len(got) != 2 {
		t.Fatalf("received %d", len(got))
	}
	out, err := e.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(url),
		Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
			{Id: aws.String("a"), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0},
			{Id: aws.String("b"), ReceiptHandle: got[1].ReceiptHandle, VisibilityTimeout: 600},
			{Id: aws.String("bad"), ReceiptHandle: aws.String("garbage"), VisibilityTimeout: 600},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Successful) != 2 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "bad" ||
		aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" || !out.Failed[0].SenderFault {
		t.Fatalf("batch result: %+v", out)
	}
	v, _ := e.srv.Queue("cmvb")
	if v.Visible != 1 || v.InFlight != 1 {
		t.Fatalf("visible %d in flight %d, want 1/1", v.Visible, v.InFlight)
	}
}

func TestLongPoll(t *testing.T) {
	t.Run("wakes as soon as a message is sent", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lp", nil)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20, MaxNumberOfMessages: 10})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lp") == 1 })
		id := e.send(t, url, "wake")
		out, err := await(t, ch)
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id {
			t.Fatalf("long poll: %v %+v", err, out)
		}
		// The fake clock never moved: the poll returned on the message, not on its timer.
		if !e.clock.Now().Equal(epoch) {
			t.Fatalf("clock moved to %v", e.clock.Now())
		}
		calls := e.srv.Calls("ReceiveMessage")
		if len(calls) != 1 || calls[0].Wait != 20*time.Second || calls[0].N != 1 {
			t.Fatalf("call log: %+v", calls)
		}
	})
	t.Run("the poll that waited longest gets the message", func(t *testing.T) {
		// Three polls in line A, B, C; each message goes to the head of
		// the line, and a poll that got one queues again at the back.
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lpo", nil)
		poll := func() <-chan result[*sqs.ReceiveMessageOutput] {
			n := e.srv.Pollers("lpo")
			ch := async(func() (*sqs.ReceiveMessageOutput, error) {
				return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20, MaxNumberOfMessages: 10})
			})
			waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lpo") == n+1 })
			return ch
		}
		polls := map[string]<-chan result[*sqs.ReceiveMessageOutput]{"A": poll(), "B": poll(), "C": poll()}
		for i, want := range []string{"A", "B", "C", "A", "B"} {
			id := e.send(t, url, fmt.Sprint(i))
			out, err := await(t, polls[want])
			if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id {
				t.Fatalf("message %d: poll %s got %v %+v", i, want, err, out)
			}
			polls[want] = poll()
		}
	})
	t.Run("a message visible again goes to the poll that waited longest", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lpv2", map[string]string{"VisibilityTimeout": "5"})
		id := e.send(t, url, "again")
		if got := e.receive(t, url, 1); len(got) != 1 {
			t.Fatalf("first receive: %d messages", len(got))
		}
		var polls []<-chan result[*sqs.ReceiveMessageOutput]
		for i := range 3 {
			polls = append(polls, async(func() (*sqs.ReceiveMessageOutput, error) {
				return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
			}))
			waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lpv2") == i+1 && e.clock.Waiters() == i+1 })
		}
		// Every poll's timer fires at the visibility timeout; the first in
		// line takes the message whichever runs first.
		e.clock.Advance(5 * time.Second)
		out, err := await(t, polls[0])
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id {
			t.Fatalf("first poll: %v %+v", err, out)
		}
		waitFor(t, "the other polls to wait again", func() bool { return e.srv.Pollers("lpv2") == 2 })
		for _, ch := range polls[1:] {
			select {
			case r := <-ch:
				t.Fatalf("a later poll returned: %+v", r)
			default:
			}
		}
	})
	t.Run("returns empty at the wait time", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lp", nil)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lp") == 1 && e.clock.Waiters() == 1 })
		e.clock.Advance(4 * time.Second)
		select {
		case r := <-ch:
			t.Fatalf("returned before the wait time: %+v", r)
		default:
		}
		e.clock.Advance(time.Second)
		out, err := await(t, ch)
		if err != nil || len(out.Messages) != 0 {
			t.Fatalf("got %v %+v, want empty", err, out)
		}
	})
	t.Run("queue default ReceiveMessageWaitTimeSeconds", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lpd", map[string]string{"ReceiveMessageWaitTimeSeconds": "20"})
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lpd") == 1 })
		e.clock.Advance(20 * time.Second)
		if out, err := await(t, ch); err != nil || len(out.Messages) != 0 {
			t.Fatalf("got %v %+v", err, out)
		}
	})
	t.Run("wakes when an in-flight message becomes visible", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lpv", map[string]string{"VisibilityTimeout": "10"})
		e.send(t, url, "x")
		e.receive(t, url, 1)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lpv") == 1 && e.clock.Waiters() == 1 })
		e.clock.Advance(10 * time.Second)
		out, err := await(t, ch)
		if err != nil || len(out.Messages) != 1 || out.Messages[0].Attributes["ApproximateReceiveCount"] != "2" {
			t.Fatalf("got %v %+v", err, out)
		}
	})
	// A waiting poll set its timer from the earliest hidden message when
	// it began to wait; a message hidden since then that becomes visible
	// sooner is still delivered to it then, as SQS does.
	t.Run("wakes for a message hidden after it began waiting", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lph", nil)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lph") == 1 && e.clock.Waiters() == 1 })
		out, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("late"), DelaySeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(2 * time.Second)
		got, err := await(t, ch)
		if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].MessageId) != aws.ToString(out.MessageId) {
			t.Fatalf("got %v %+v", err, got)
		}
	})
	t.Run("wakes for a visibility shortened after it began waiting", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lps", map[string]string{"VisibilityTimeout": "10"})
		id := e.send(t, url, "x")
		m := e.receive(t, url, 1)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lps") == 1 && e.clock.Waiters() == 1 })
		if _, err := e.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
			ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 1}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		got, err := await(t, ch)
		if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].MessageId) != id {
			t.Fatalf("got %v %+v", err, got)
		}
	})
	// The first poll in line keeps the timer of what becomes visible next:
	// when it leaves, the next one takes that over.
	t.Run("a poll leaving hands on the wake for a hidden message", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lpl", nil)
		first, cancel := context.WithCancel(ctx)
		ch1 := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(first, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		})
		waitFor(t, "the first poll to block", func() bool { return e.srv.Pollers("lpl") == 1 && e.clock.Waiters() == 1 })
		ch2 := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		})
		waitFor(t, "the second poll to block", func() bool { return e.srv.Pollers("lpl") == 2 && e.clock.Waiters() == 2 })
		out, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("late"), DelaySeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first poll to wait for the message", func() bool { return e.srv.Pollers("lpl") == 2 && e.clock.Waiters() == 2 })
		cancel()
		if _, err := await(t, ch1); !errors.Is(err, context.Canceled) {
			t.Fatalf("first poll: %v, want context.Canceled", err)
		}
		waitFor(t, "the first poll to leave", func() bool { return e.srv.Pollers("lpl") == 1 && e.clock.Waiters() == 1 })
		e.clock.Advance(2 * time.Second)
		got, err := await(t, ch2)
		if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].MessageId) != aws.ToString(out.MessageId) {
			t.Fatalf("second poll: %v %+v", err, got)
		}
	})
	t.Run("real clock wakes early", func(t *testing.T) {
		ctx := t.Context()
		e := newEnvClock(t)
		url := e.queue(t, "lpr", nil)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lpr") == 1 })
		e.send(t, url, "x")
		if out, err := await(t, ch); err != nil || len(out.Messages) != 1 {
			t.Fatalf("got %v %+v", err, out)
		}
	})
	t.Run("client cancel ends the poll", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "lpc", nil)
		cctx, cancel := context.WithCancel(ctx)
		ch := async(func() (*sqs.ReceiveMessageOutput, error) {
			return e.client.ReceiveMessage(cctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
		})
		waitFor(t, "the long poll to block", func() bool { return e.srv.Pollers("lpc") == 1 })
		cancel()
		if _, err := await(t, ch); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		waitFor(t, "the server to drop the poll", func() bool { return e.srv.Pollers("lpc") == 0 })
		// A message sent now is not lost to the abandoned poll.
		e.send(t, url, "x")
		if got := e.receive(t, url, 1); len(got) != 1 {
			t.Fatal("message lost to an abandoned poll")
		}
	})
}

func TestRedriveToDeadLetterQueue(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dlqURL := e.queue(t, "dlq", nil)
	arn := e.srv.QueueARN("dlq")
	url := e.queue(t, "src", map[string]string{
		"VisibilityTimeout": "10",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"2"}`,
	})
	id := e.send(t, url, "poison")
	for i := 1; i <= 2; i++ {
		got := e.receive(t, url, 10)
		if len(got) != 1 || got[0].Attributes["ApproximateReceiveCount"] != strconv.Itoa(i) {
			t.Fatalf("receive %d: %+v", i, got)
		}
		e.clock.Advance(10 * time.Second)
	}
	// The third receive would exceed maxReceiveCount: the message moves instead.
	if got := e.receive(t, url, 10); len(got) != 0 {
		t.Fatalf("received past maxReceiveCount: %+v", got)
	}
	src, _ := e.srv.Queue("src")
	dlq, _ := e.srv.Queue("dlq")
	if !src.Empty() || src.Stats.MovedToDLQ != 1 || dlq.Visible != 1 || dlq.Stats.MovedIn != 1 {
		t.Fatalf("src %+v dlq %+v", src.Stats, dlq)
	}
	got := e.receive(t, dlqURL, 10)
	if len(got) != 1 || aws.ToString(got[0].MessageId) != id || aws.ToString(got[0].Body) != "poison" {
		t.Fatalf("dlq receive: %+v", got)
	}
	if got[0].Attributes["DeadLetterQueueSourceArn"] != e.srv.QueueARN("src") ||
		got[0].Attributes["SentTimestamp"] != strconv.FormatInt(epoch.UnixMilli(), 10) {
		t.Errorf("dlq attributes: %v", got[0].Attributes)
	}
	attrs, err := e.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	if err != nil || attrs.Attributes["RedrivePolicy"] != `{"deadLetterTargetArn":"`+arn+`","maxReceiveCount":2}` {
		t.Errorf("RedrivePolicy attribute = %q (%v)", attrs.Attributes["RedrivePolicy"], err)
	}
}

func TestRedrivePolicyValidation(t *testing.T) {
	e := newEnv(t)
	e.queue(t, "dlq", nil)
	tests := []struct{ name, policy string }{
		{"missing target", `{"maxReceiveCount":3}`},
		{"unknown target", `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":3}`},
		{"count zero", `{"deadLetterTargetArn":"` + e.srv.QueueARN("dlq") + `","maxReceiveCount":0}`},
		{"not json", `nope`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("src"), Attributes: map[string]string{"RedrivePolicy": tc.policy}})
			var target *types.InvalidAttributeValue
			if !errors.As(err, &target) {
				t.Fatalf("err = %v, want InvalidAttributeValue", err)
			}
		})
	}
}

func TestDelayAndRetention(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "delay", map[string]string{"DelaySeconds": "10", "MessageRetentionPeriod": "60"})
	e.send(t, url, "queue default delay")
	if _, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("own delay"), DelaySeconds: 30}); err != nil {
		t.Fatal(err)
	}
	attrs := func() map[string]string {
		out, err := e.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes
	}
	if a := attrs(); a["ApproximateNumberOfMessagesDelayed"] != "2" || a["ApproximateNumberOfMessages"] != "0" {
		t.Fatalf("attributes at send: %v", a)
	}
	if got := e.receive(t, url, 10); len(got) != 0 {
		t.Fatal("delayed message received")
	}
	e.clock.Advance(10 * time.Second)
	if a := attrs(); a["ApproximateNumberOfMessagesDelayed"] != "1" || a["ApproximateNumberOfMessages"] != "1" {
		t.Fatalf("attributes at 10 s: %v", a)
	}
	e.clock.Advance(20 * time.Second)
	if a := attrs(); a["ApproximateNumberOfMessages"] != "2" {
		t.Fatalf("attributes at 30 s: %v", a)
	}
	e.clock.Advance(30 * time.Second) // 60 s after the send: retention ends
	v, _ := e.srv.Queue("delay")
	if !v.Empty() || v.Stats.Expired != 2 {
		t.Fatalf("after retention: %+v", v)
	}
}

func TestQueueAttributes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "qa", map[string]string{"VisibilityTimeout": "45"})
	out, err := e.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"QueueArn": "arn:aws:sqs:us-east-1:000000000000:qa", "VisibilityTimeout": "45", "DelaySeconds": "0",
		"MaximumMessageSize": "262144", "MessageRetentionPeriod": "345600", "ReceiveMessageWaitTimeSeconds": "0",
		"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0",
		"ApproximateNumberOfMessagesDelayed": "0", "CreatedTimestamp": strconv.FormatInt(epoch.Unix(), 10),
	}
	for k, v := range want {
		if out.Attributes[k] != v {
			t.Errorf("%s = %q, want %q", k, out.Attributes[k], v)
		}
	}
	if _, err := e.client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"VisibilityTimeout": "5"}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.srv.Queue("qa"); v.VisibilityTimeout != 5*time.Second {
		t.Errorf("visibility after SetQueueAttributes = %v", v.VisibilityTimeout)
	}
	errTests := []struct {
		name  string
		attrs map[string]string
		want  any
	}{
		{"out of range", map[string]string{"VisibilityTimeout": "43201"}, new(*types.InvalidAttributeValue)},
		{"not a number", map[string]string{"DelaySeconds": "x"}, new(*types.InvalidAttributeValue)},
		{"unknown name", map[string]string{"Colour": "blue"}, new(*types.InvalidAttributeName)},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			_, err := e.client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: tc.attrs})
			if !errors.As(err, tc.want) {
				t.Fatalf("err = %v, want %T", err, tc.want)
			}
		})
	}
}

func TestTypedErrors(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, sqsfake.WithInflightLimit(1))
	url := e.queue(t, "errs", nil)
	missing := e.url + "/000000000000/missing"
	tests := []struct {
		name     string
		call     func() error
		target   any
		wantCode string
	}{
		{"GetQueueUrl of a missing queue", func() error {
			_, err := e.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
			return err
		}, new(*types.QueueDoesNotExist), "AWS.SimpleQueueService.NonExistentQueue"},
		{"SendMessage to a missing queue", func() error {
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(missing), MessageBody: aws.String("x")})
			return err
		}, new(*types.QueueDoesNotExist), "AWS.SimpleQueueService.NonExistentQueue"},
		{"CreateQueue with other attributes", func() error {
			_, err := e.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("errs"), Attributes: map[string]string{"VisibilityTimeout": "99"}})
			return err
		}, new(*types.QueueNameExists), "QueueAlreadyExists"},
		{"DeleteMessage garbage handle", func() error {
			_, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("AQEBgarbage")})
			return err
		}, new(*types.ReceiptHandleIsInvalid), "ReceiptHandleIsInvalid"},
		{"empty batch", func() error {
			_, err := e.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{}})
			return err
		}, new(*types.EmptyBatchRequest), "AWS.SimpleQueueService.EmptyBatchRequest"},
		{"eleven entries", func() error {
			var entries []types.SendMessageBatchRequestEntry
			for i := range 11 {
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("x")})
			}
			_, err := e.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
			return err
		}, new(*types.TooManyEntriesInBatchRequest), "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"},
		{"repeated ids", func() error {
			_, err := e.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageBody: aws.String("x")}, {Id: aws.String("a"), MessageBody: aws.String("y")},
			}})
			return err
		}, new(*types.BatchEntryIdsNotDistinct), "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"},
		{"bad batch id", func() error {
			_, err := e.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
				{Id: aws.String("no spaces"), ReceiptHandle: aws.String("x")},
			}})
			return err
		}, new(*types.InvalidBatchEntryId), "AWS.SimpleQueueService.InvalidBatchEntryId"},
		{"batch over 256 KiB", func() error {
			big := strings.Repeat("x", 200*1024)
			_, err := e.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageBody: aws.String(big)}, {Id: aws.String("b"), MessageBody: aws.String(big)},
			}})
			return err
		}, new(*types.BatchRequestTooLong), "AWS.SimpleQueueService.BatchRequestTooLong"},
		{"invalid characters", func() error {
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("bad \x00 char")})
			return err
		}, new(*types.InvalidMessageContents), "InvalidMessageContents"},
		{"MaxNumberOfMessages 11", func() error {
			_, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
			return err
		}, new(smithy.APIError), "InvalidParameterValue"},
		{"WaitTimeSeconds 21", func() error {
			_, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 21})
			return err
		}, new(smithy.APIError), "InvalidParameterValue"},
		{"message over 256 KiB", func() error {
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(strings.Repeat("x", 262145))})
			return err
		}, new(smithy.APIError), "InvalidParameterValue"},
		{"reserved attribute name", func() error {
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
				MessageAttributes: map[string]types.MessageAttributeValue{"AWS.x": {DataType: aws.String("String"), StringValue: aws.String("v")}}})
			return err
		}, new(smithy.APIError), "InvalidParameterValue"},
		{"non-numeric Number", func() error {
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
				MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("ten")}}})
			return err
		}, new(smithy.APIError), "InvalidParameterValue"},
		{"FIFO unsupported", func() error {
			_, err := e.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q.fifo")})
			return err
		}, new(*types.UnsupportedOperation), "AWS.SimpleQueueService.UnsupportedOperation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.As(err, tc.target) {
				t.Fatalf("err = %v (%T), want %T", err, err, tc.target)
			}
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tc.wantCode || api.ErrorFault() != smithy.FaultClient {
				t.Fatalf("code %q fault %v, want %q client", api.ErrorCode(), api.ErrorFault(), tc.wantCode)
			}
		})
	}
	t.Run("message of exactly 256 KiB is accepted", func(t *testing.T) {
		ctx := t.Context()
		if _, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(strings.Repeat("x", 262144))}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("OverLimit past the in-flight limit", func(t *testing.T) {
		ctx := t.Context()
		e.send(t, url, "second")
		if got := e.receive(t, url, 1); len(got) != 1 {
			t.Fatal("no message")
		}
		_, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		var target *types.OverLimit
		if !errors.As(err, &target) {
			t.Fatalf("err = %v, want OverLimit", err)
		}
	})
	t.Run("PurgeQueue twice within 60 s", func(t *testing.T) {
		ctx := t.Context()
		if _, err := e.client.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
			t.Fatal(err)
		}
		if v, _ := e.srv.Queue("errs"); !v.Empty() || v.Stats.Purged != 2 {
			t.Fatalf("after purge: %+v", v)
		}
		_, err := e.client.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
		var target *types.PurgeQueueInProgress
		if !errors.As(err, &target) {
			t.Fatalf("err = %v, want PurgeQueueInProgress", err)
		}
		e.clock.Advance(60 * time.Second)
		if _, err := e.client.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
			t.Fatalf("purge after 60 s: %v", err)
		}
	})
}

func TestBatchPartialFailures(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "batch", nil)
	sent, err := e.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("ok1"), MessageBody: aws.String("one")},
		{Id: aws.String("bad"), MessageBody: aws.String("nul \x00")},
		{Id: aws.String("ok2"), MessageBody: aws.String("two"), DelaySeconds: 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent.Successful) != 2 || len(sent.Failed) != 1 || aws.ToString(sent.Failed[0].Id) != "bad" ||
		aws.ToString(sent.Failed[0].Code) != "InvalidMessageContents" || !sent.Failed[0].SenderFault {
		t.Fatalf("send batch: %+v", sent)
	}
	e.clock.Advance(5 * time.Second)
	got := e.receive(t, url, 10)
	if len(got) != 2 {
		t.Fatalf("received %d, want 2", len(got))
	}
	del, err := e.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: got[0].ReceiptHandle},
		{Id: aws.String("b"), ReceiptHandle: aws.String("forged")},
		{Id: aws.String("c"), ReceiptHandle: got[1].ReceiptHandle},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(del.Successful) != 2 || len(del.Failed) != 1 || aws.ToString(del.Failed[0].Id) != "b" ||
		aws.ToString(del.Failed[0].Code) != "ReceiptHandleIsInvalid" || !del.Failed[0].SenderFault {
		t.Fatalf("delete batch: %+v", del)
	}
	if v, _ := e.srv.Queue("batch"); !v.Empty() || v.Stats.Deleted != 2 {
		t.Fatalf("queue: %+v", v.Stats)
	}
	c := e.srv.Calls("DeleteMessageBatch")
	if len(c) != 1 || c[0].N != 3 || c[0].Failed != 1 || len(c[0].MessageIDs) != 2 {
		t.Fatalf("call log: %+v", c)
	}
}

func TestQueueLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, n := range []string{"app-a", "app-b", "other"} {
		e.queue(t, n, nil)
	}
	// CreateQueue is idempotent for the same attributes.
	if u := e.queue(t, "app-a", nil); u != e.url+"/000000000000/app-a" {
		t.Fatalf("queue URL %s", u)
	}
	list, err := e.client.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("app-"), MaxResults: aws.Int32(1)})
	if err != nil || len(list.QueueUrls) != 1 || list.NextToken == nil {
		t.Fatalf("page 1: %v %+v", err, list)
	}
	list2, err := e.client.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("app-"), MaxResults: aws.Int32(1), NextToken: list.NextToken})
	if err != nil || len(list2.QueueUrls) != 1 || list2.QueueUrls[0] != e.url+"/000000000000/app-b" {
		t.Fatalf("page 2: %v %+v", err, list2)
	}
	url, err := e.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("app-a")})
	if err != nil {
		t.Fatal(err)
	}
	ch := async(func() (*sqs.ReceiveMessageOutput, error) {
		return e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, WaitTimeSeconds: 20})
	})
	waitFor(t, "the long poll", func() bool { return e.srv.Pollers("app-a") == 1 })
	if _, err := e.client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	var gone *types.QueueDoesNotExist
	if _, err := await(t, ch); !errors.As(err, &gone) {
		t.Fatalf("long poll on a deleted queue: %v", err)
	}
	var recent *types.QueueDeletedRecently
	if _, err := e.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("app-a")}); !errors.As(err, &recent) {
		t.Fatalf("recreate within 60 s: %v", err)
	}
	e.clock.Advance(60 * time.Second)
	e.queue(t, "app-a", nil)
}

func TestFaultInjection(t *testing.T) {
	tests := []struct {
		name      string
		fault     sqsfake.Fault
		wantCalls int  // requests the server saw for one SDK call
		wantErr   bool // the SDK call fails after its 3 attempts
		wantCode  string
		throttle  bool // the SDK classified the retried errors as throttles
		wantMsgs  int  // messages in the queue afterwards
	}{
		{"throttling is retried", sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle, Count: 2}, 3, false, "", true, 1},
		{"RequestThrottled is retried", sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle, Code: "RequestThrottled", Count: 2}, 3, false, "", true, 1},
		{"persistent throttling fails after 3 attempts", sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle}, 3, true, "ThrottlingException", true, 0},
		{"500 is retried", sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultServerError, Count: 1}, 2, false, "", false, 1},
		{"dropped response: applied, retried, duplicated", sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultDropResponse, Count: 1}, 2, false, "", false, 2},
		{"500 after apply: applied, retried, duplicated", sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultServerErrorAfterApply, Count: 1}, 2, false, "", false, 2},
		{"other operations untouched", sqsfake.Fault{Op: "DeleteMessage", Kind: sqsfake.FaultServerError}, 1, false, "", false, 1},
		{"other queues untouched", sqsfake.Fault{Queue: "elsewhere", Kind: sqsfake.FaultServerError}, 1, false, "", false, 1},
		{"skip lets the first through", sqsfake.Fault{Kind: sqsfake.FaultServerError, Skip: 1, Count: 1}, 1, false, "", false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newEnv(t)
			url := e.queue(t, "f", nil)
			id := e.srv.InjectFault(tc.fault)
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
			if tc.wantErr {
				var api smithy.APIError
				if !errors.As(err, &api) || api.ErrorCode() != tc.wantCode {
					t.Fatalf("err = %v, want code %s", err, tc.wantCode)
				}
			} else if err != nil {
				t.Fatalf("SendMessage: %v", err)
			}
			calls := e.srv.Calls("SendMessage")
			if len(calls) != tc.wantCalls {
				t.Fatalf("server saw %d SendMessage requests, want %d: %+v", len(calls), tc.wantCalls, calls)
			}
			for i, c := range calls {
				if c.InvocationID != calls[0].InvocationID || c.Attempt != i+1 {
					t.Errorf("call %d: invocation %s attempt %d, want one invocation, attempt %d", i, c.InvocationID, c.Attempt, i+1)
				}
			}
			if got := e.srv.Counters()["SendMessage"]; got != tc.wantCalls {
				t.Errorf("counter SendMessage = %d, want %d", got, tc.wantCalls)
			}
			if got := e.backoff.retries(); got != tc.wantCalls-1 {
				t.Errorf("SDK scheduled %d retries, want %d", got, tc.wantCalls-1)
			}
			for i, th := range e.backoff.throttle {
				if th != tc.throttle {
					t.Errorf("retry %d: SDK throttle classification %v, want %v (err %v)", i, th, tc.throttle, e.backoff.errs[i])
				}
			}
			if v, _ := e.srv.Queue("f"); len(v.Messages) != tc.wantMsgs {
				t.Errorf("queue holds %d messages, want %d", len(v.Messages), tc.wantMsgs)
			}
			if fired := e.srv.FaultFired(id); (fired > 0) != (tc.wantCalls > 1 || tc.wantErr) {
				t.Errorf("fault fired %d times", fired)
			}
		})
	}

	t.Run("dropped delete is idempotent on retry", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		url := e.queue(t, "f", nil)
		e.send(t, url, "x")
		got := e.receive(t, url, 1)
		e.srv.InjectFault(sqsfake.Fault{Op: "DeleteMessage", Kind: sqsfake.FaultDropResponse, Count: 1})
		if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: got[0].ReceiptHandle}); err != nil {
			t.Fatalf("DeleteMessage: %v", err)
		}
		calls := e.srv.Calls("DeleteMessage")
		if len(calls) != 2 || calls[0].Status != 0 || len(calls[0].MessageIDs) != 1 || calls[1].Status != 200 {
			t.Fatalf("calls: %+v", calls)
		}
		if v, _ := e.srv.Queue("f"); !v.Empty() || v.Stats.Deleted != 1 {
			t.Fatalf("queue: %+v", v)
		}
	})

	t.Run("latency on the server clock", func(t *testing.T) {
		ctx := t.Context()
		e := newEnv(t)
		e.srv.InjectFault(sqsfake.Fault{Op: "CreateQueue", Kind: sqsfake.FaultLatency, Latency: 3 * time.Second})
		ch := async(func() (*sqs.CreateQueueOutput, error) {
			return e.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("slow")})
		})
		waitFor(t, "the delayed request", func() bool { return e.clock.Waiters() == 1 })
		if _, ok := e.srv.Queue("slow"); ok {
			t.Fatal("queue created before the latency elapsed")
		}
		e.clock.Advance(3 * time.Second)
		if _, err := await(t, ch); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("probability is deterministic with a seed", func(t *testing.T) {
		pattern := func() string {
			srv := sqsfake.New(sqsfake.WithSeed(42))
			if _, err := srv.CreateQueue("p", nil); err != nil {
				t.Fatal(err)
			}
			srv.InjectFault(sqsfake.Fault{Kind: sqsfake.FaultServerError, Probability: 0.3})
			var b strings.Builder
			for range 60 {
				rec := rawCall(srv, "GetQueueUrl", `{"QueueName":"p"}`)
				fmt.Fprint(&b, rec.Code/100)
			}
			return b.String()
		}
		a, b := pattern(), pattern()
		if a != b || !strings.Contains(a, "5") || !strings.Contains(a, "2") {
			t.Fatalf("patterns differ or are degenerate:\n%s\n%s", a, b)
		}
	})
}

func TestRawProtocol(t *testing.T) {
	srv := sqsfake.New()
	tests := []struct {
		name       string
		op, body   string
		wantStatus int
		wantType   string
		wantQuery  string
	}{
		{"missing queue", "GetQueueUrl", `{"QueueName":"nope"}`, 400, "com.amazonaws.sqs#QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue;Sender"},
		{"unknown operation", "Frobnicate", `{}`, 400, "com.amazonaws.sqs#UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation;Sender"},
		{"bad json", "GetQueueUrl", `{`, 400, "com.amazonaws.sqs#SerializationException", "SerializationException;Sender"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := rawCall(srv, tc.op, tc.body)
			if rec.Code != tc.wantStatus || rec.Header().Get("x-amzn-query-error") != tc.wantQuery {
				t.Fatalf("status %d query %q", rec.Code, rec.Header().Get("x-amzn-query-error"))
			}
			if !strings.Contains(rec.Body.String(), `"__type":"`+tc.wantType+`"`) || !strings.Contains(rec.Body.String(), `"message":`) {
				t.Fatalf("body %s", rec.Body)
			}
		})
	}
	t.Run("queue URL uses the request host", func(t *testing.T) {
		rec := rawCall(srv, "CreateQueue", `{"QueueName":"h"}`)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"QueueUrl":"http://sqs.test:4566/000000000000/h"`) {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	})
}

// TestMaximumMessageSizeCountsAttributes: SendMessage counts the body plus
// each attribute's name, data type and value bytes against the queue's
// MaximumMessageSize, accepting a message of exactly that size.
func TestMaximumMessageSizeCountsAttributes(t *testing.T) {
	e := newEnv(t)
	def := e.queue(t, "size-default", nil)
	big := e.queue(t, "size-1mib", map[string]string{"MaximumMessageSize": "1048576"})
	attrs := map[string]types.MessageAttributeValue{
		"k":   {DataType: aws.String("String"), StringValue: aws.String("vv")},     // 1 + 6 + 2
		"n":   {DataType: aws.String("Number.int"), StringValue: aws.String("42")}, // 1 + 10 + 2
		"bin": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},      // 3 + 6 + 3
	}
	const attrBytes = 9 + 13 + 12
	tests := []struct {
		name  string
		url   string
		body  int
		fault bool
	}{
		{"exactly the default", def, 262144 - attrBytes, false},
		{"one byte over the default", def, 262144 - attrBytes + 1, true},
		{"exactly 1 MiB", big, 1048576 - attrBytes, false},
		{"one byte over 1 MiB", big, 1048576 - attrBytes + 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			_, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{
				QueueUrl: aws.String(tc.url), MessageBody: aws.String(strings.Repeat("é", tc.body/2) + strings.Repeat("x", tc.body%2)),
				MessageAttributes: attrs,
			})
			var ae smithy.APIError
			switch {
			case !tc.fault && err != nil:
				t.Fatalf("SendMessage of %d bytes = %v, want accepted", tc.body+attrBytes, err)
			case tc.fault && (!errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" || !strings.Contains(ae.ErrorMessage(), "shorter than")):
				t.Fatalf("SendMessage of %d bytes = %v, want InvalidParameterValue: must be shorter", tc.body+attrBytes, err)
			}
		})
	}
}
