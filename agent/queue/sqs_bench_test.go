package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/agent/queue"
)

// fill puts n messages on the fixture's queue, 10 per SendMessageBatch.
func (f *fixture) fill(tb testing.TB, n int) {
	tb.Helper()
	for i := 0; i < n; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(n, i+10); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id:          aws.String(fmt.Sprint(j)),
				MessageBody: aws.String(fmt.Sprintf(`{"id":"t-%d","host":"web-01.example.com","diagnostic":"noop"}`, j)),
			})
		}
		out, err := f.client.SendMessageBatch(tb.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.url), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			tb.Fatalf("SendMessageBatch: %v %v", err, out)
		}
	}
}

// BenchmarkReceiveDelete measures tasks/s through receive+delete on the same
// fake SQS in one run:
//
//   - sdk-loop-N: a plain SDK loop, ReceiveMessage(N) then DeleteMessageBatch
//     (N=4 is the fair baseline for 4 workers that receive only for free slots);
//   - source-batch: queue.SQS, Receive(10) then the 10 Deletes concurrently;
//   - source-workers-N: queue.SQS the way the agent uses it, a receive loop
//     asking for the free worker slots and N workers each deleting its own
//     message when its (no-op) task ends.
//
// Run: go test -run '^$' -bench ReceiveDelete -benchtime 3000x ./agent/queue/
func BenchmarkReceiveDelete(b *testing.B) {
	for _, batch := range []int32{10, 4} {
		b.Run(fmt.Sprintf("sdk-loop-%d", batch), func(b *testing.B) {
			f := newFixture(b)
			f.fill(b, b.N)
			ctx := context.Background()
			b.ResetTimer()
			for done := 0; done < b.N; {
				out, err := f.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl: aws.String(f.url), MaxNumberOfMessages: batch, WaitTimeSeconds: 1,
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
				})
				if err != nil {
					b.Fatal(err)
				}
				if len(out.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
				}
				if _, err := f.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(f.url), Entries: entries}); err != nil {
					b.Fatal(err)
				}
				done += len(out.Messages)
			}
			b.StopTimer()
			report(b, f)
		})
	}
	b.Run("source-batch", func(b *testing.B) {
		f := newFixture(b)
		f.fill(b, b.N)
		q := f.source(queue.SQSOptions{})
		defer q.Close(context.Background())
		ctx := context.Background()
		b.ResetTimer()
		for done := 0; done < b.N; {
			ms, err := q.Receive(ctx, 10)
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for _, m := range ms {
				wg.Go(func() {
					if err := q.Delete(ctx, m); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			done += len(ms)
		}
		b.StopTimer()
		report(b, f)
	})
	for _, workers := range []int{4, 16} {
		b.Run(fmt.Sprintf("source-workers-%d", workers), func(b *testing.B) {
			f := newFixture(b)
			f.fill(b, b.N)
			q := f.source(queue.SQSOptions{})
			defer q.Close(context.Background())
			ctx := context.Background()
			slots := make(chan struct{}, workers)
			var wg sync.WaitGroup
			b.ResetTimer()
			for done := 0; done < b.N; {
				slots <- struct{}{} // at least one free slot
				free := 1
			more:
				for free < 10 {
					select {
					case slots <- struct{}{}:
						free++
					default:
						break more
					}
				}
				ms, err := q.Receive(ctx, free)
				if err != nil {
					b.Fatal(err)
				}
				for range free - len(ms) {
					<-slots
				}
				for _, m := range ms {
					wg.Go(func() {
						defer func() { <-slots }()
						if err := q.Delete(ctx, m); err != nil {
							b.Error(err)
						}
					})
				}
				done += len(ms)
			}
			wg.Wait()
			b.StopTimer()
			report(b, f)
		})
	}
}

func report(b *testing.B, f *fixture) {
	b.Helper()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	c := f.srv.Counters()
	b.ReportMetric(float64(c["DeleteMessageBatch"])/float64(b.N), "deletecalls/task")
	b.ReportMetric(float64(c["ReceiveMessage"])/float64(b.N), "receivecalls/task")
	if v, _ := f.srv.Queue("tasks"); !v.Empty() {
		b.Errorf("queue not empty: %d visible, %d in flight", v.Visible, v.InFlight)
	}
}
