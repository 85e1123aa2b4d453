package queue_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/tracing"
)

// TestSQSTraceContextTravels: a message's traceparent attribute and its
// AWSTraceHeader system attribute are received, and stay with the task
// when deferrals re-send it as a new message.
func TestSQSTraceContextTravels(t *testing.T) {
	const (
		tp   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	)
	ctx := t.Context()
	f := newFixture(t)
	f.redrive(t, 3)
	q := f.source(queue.SQSOptions{DLQURL: f.dlqURL})
	defer q.Close(ctx)
	_, err := f.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String(`{"host":"a"}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			tracing.AttrTraceparent: {DataType: aws.String("String"), StringValue: aws.String(tp)}},
		MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			tracing.AWSTraceHeader: {DataType: aws.String("String"), StringValue: aws.String(xray)}}})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 6 { // past maxReceiveCount: re-sent at least once
		ms, err := q.Receive(ctx, 1)
		if err != nil || len(ms) != 1 {
			t.Fatalf("round %d: %d messages, %v", round, len(ms), err)
		}
		m := ms[0]
		if m.Attributes[tracing.AttrTraceparent] != tp || m.TraceHeader != xray {
			t.Fatalf("round %d: traceparent %q, AWSTraceHeader %q; want both kept", round, m.Attributes[tracing.AttrTraceparent], m.TraceHeader)
		}
		if err := q.Defer(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if f.sends("tasks") < 2 { // the test's own send, then a re-send
		t.Fatal("never re-sent: the test does not cover the re-send")
	}
}
