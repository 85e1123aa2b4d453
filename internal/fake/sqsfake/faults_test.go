package sqsfake_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

func TestBatchEntryFault(t *testing.T) {
	tests := []struct {
		name       string
		op         string
		fault      sqsfake.Fault
		wantFailed []string // ids of the failed entries of a 4-entry batch
		wantLeft   int      // messages left in the queue
	}{
		{"delete: second entry fails", "DeleteMessageBatch", sqsfake.Fault{Op: "DeleteMessageBatch", Kind: sqsfake.FaultBatchEntryError, Skip: 1, Count: 1}, []string{"1"}, 1},
		{"delete: every entry fails", "DeleteMessageBatch", sqsfake.Fault{Kind: sqsfake.FaultBatchEntryError}, []string{"0", "1", "2", "3"}, 4},
		{"send: last two fail", "SendMessageBatch", sqsfake.Fault{Op: "SendMessageBatch", Kind: sqsfake.FaultBatchEntryError, Skip: 2}, []string{"2", "3"}, 6},
		{"change visibility: first fails", "ChangeMessageVisibilityBatch", sqsfake.Fault{Kind: sqsfake.FaultBatchEntryError, Count: 1}, []string{"0"}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newEnv(t)
			url := e.queue(t, "be", nil)
			for i := range 4 {
				e.send(t, url, "m"+strconv.Itoa(i))
			}
			got := e.receive(t, url, 10)
			if len(got) != 4 {
				t.Fatalf("received %d", len(got))
			}
			e.srv.InjectFault(tc.fault)
			var failed []types.BatchResultErrorEntry
			var okN int
			switch tc.op {
			case "DeleteMessageBatch":
				var entries []types.DeleteMessageBatchRequestEntry
				for i, m := range got {
					entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				out, err := e.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err != nil {
					t.Fatal(err)
				}
				failed, okN = out.Failed, len(out.Successful)
			case "SendMessageBatch":
				var entries []types.SendMessageBatchRequestEntry
				for i := range 4 {
					entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("n")})
				}
				out, err := e.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err != nil {
					t.Fatal(err)
				}
				failed, okN = out.Failed, len(out.Successful)
			case "ChangeMessageVisibilityBatch":
				var entries []types.ChangeMessageVisibilityBatchRequestEntry
				for i, m := range got {
					entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				}
				out, err := e.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err != nil {
					t.Fatal(err)
				}
				failed, okN = out.Failed, len(out.Successful)
			}
			var ids []string
			for _, f := range failed {
				ids = append(ids, aws.ToString(f.Id))
				if aws.ToString(f.Code) != "InternalError" || f.SenderFault {
					t.Errorf("failed entry %+v, want InternalError, not a sender fault", f)
				}
			}
			if strconv.Quote(join(ids)) != strconv.Quote(join(tc.wantFailed)) || okN != 4-len(tc.wantFailed) {
				t.Fatalf("failed %v (%d ok), want %v", ids, okN, tc.wantFailed)
			}
			v, _ := e.srv.Queue("be")
			if len(v.Messages) != tc.wantLeft {
				t.Fatalf("%d messages left, want %d", len(v.Messages), tc.wantLeft)
			}
			if tc.op == "ChangeMessageVisibilityBatch" && (v.Visible != 3 || v.InFlight != 1) {
				t.Fatalf("visible %d in flight %d: the failed entry must stay in flight", v.Visible, v.InFlight)
			}
		})
	}
}

func join(xs []string) string {
	out := ""
	for _, x := range xs {
		out += x + ","
	}
	return out
}

func TestDuplicateDeliveryFault(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	url := e.queue(t, "dup", map[string]string{"VisibilityTimeout": "600"})
	id := e.send(t, url, "once")
	e.srv.InjectFault(sqsfake.Fault{Op: "ReceiveMessage", Kind: sqsfake.FaultDuplicateDelivery, Count: 1})
	first := e.receive(t, url, 10)
	second := e.receive(t, url, 10) // no time passed: the duplicate
	if len(first) != 1 || len(second) != 1 || aws.ToString(second[0].MessageId) != id {
		t.Fatalf("first %d second %d", len(first), len(second))
	}
	if second[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Errorf("duplicate receive count %s", second[0].Attributes["ApproximateReceiveCount"])
	}
	if got := e.receive(t, url, 10); len(got) != 0 {
		t.Fatal("fault fired more than Count")
	}
	// The first consumer's handle is stale now: its delete deletes nothing.
	if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.srv.Queue("dup"); v.InFlight != 1 || v.Stats.StaleDeletes != 1 {
		t.Fatalf("after stale delete: %+v", v)
	}
	if _, err := e.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: second[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.srv.Queue("dup"); !v.Empty() {
		t.Fatalf("not deleted: %+v", v)
	}
}
