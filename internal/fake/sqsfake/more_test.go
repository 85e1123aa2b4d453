package sqsfake_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

func TestCloseEndsLongPolls(t *testing.T) {
	e := newEnv(t)
	url := e.queue(t, "c", nil)
	ch := async(func() (*sqs.ReceiveMessageOutput, error) {
		return e.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
	})
	waitFor(t, "the long poll", func() bool { return e.srv.Pollers("c") == 1 })
	e.srv.Close()
	if out, err := await(t, ch); err != nil || len(out.Messages) != 0 {
		t.Fatalf("got %v %+v, want an empty response", err, out)
	}
}

// A ReceiveMessage whose response is lost leaves the messages in flight: the
// consumer never saw them, and SQS redelivers them after the visibility
// timeout with a higher receive count.
func TestDroppedReceiveRedelivers(t *testing.T) {
	e := newEnv(t)
	url := e.queue(t, "dr", map[string]string{"VisibilityTimeout": "30"})
	id := e.send(t, url, "x")
	e.srv.InjectFault(sqsfake.Fault{Op: "ReceiveMessage", Kind: sqsfake.FaultDropResponse, Count: 1})
	if got := e.receive(t, url, 10); len(got) != 0 { // the SDK retried; the message is in flight
		t.Fatalf("received %d after the dropped response", len(got))
	}
	calls := e.srv.Calls("ReceiveMessage")
	if len(calls) != 2 || calls[0].Status != 0 || calls[0].N != 1 || calls[1].N != 0 {
		t.Fatalf("calls: %+v", calls)
	}
	e.clock.Advance(30 * time.Second)
	got := e.receive(t, url, 10)
	if len(got) != 1 || aws.ToString(got[0].MessageId) != id || got[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("redelivery: %+v", got)
	}
}

// The agent binary builds its client from the SDK default chain; the fake
// must work through AWS_ENDPOINT_URL_SQS unchanged.
func TestDefaultConfigChainWithEndpointEnv(t *testing.T) {
	srv, ts := sqsfake.NewTestServer(t)
	url, err := srv.CreateQueue("env", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_SQS": ts.URL, "AWS_REGION": "eu-west-1",
		"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "",
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PROFILE": "",
		"AWS_ENDPOINT_URL": "", "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := sqs.NewFromConfig(cfg)
	if _, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("via env")}); err != nil {
		t.Fatal(err)
	}
	out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSenderId}})
	if err != nil || len(out.Messages) != 1 || out.Messages[0].Attributes["SenderId"] != "AKIDENV" {
		t.Fatalf("receive: %v %+v", err, out)
	}
}

// Concurrent consumers on the real clock: every message is delivered exactly
// once while its visibility timeout holds, and all are deleted.
func TestConcurrentConsumersDeliverOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnvClock(t)
	url := e.queue(t, "conc", map[string]string{"VisibilityTimeout": "600"})
	const n = 300
	for i := 0; i < n; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < i+10; j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(fmt.Sprint("task-", j))})
		}
		if out, err := e.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil || len(out.Failed) != 0 {
			t.Fatalf("send batch: %v %+v", err, out)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				done := len(seen) == n
				mu.Unlock()
				if done {
					return
				}
				out, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					errs <- err
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				var del []types.DeleteMessageBatchRequestEntry
				mu.Lock()
				for i, m := range out.Messages {
					seen[aws.ToString(m.Body)]++
					del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				mu.Unlock()
				res, err := e.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del})
				if err != nil {
					errs <- fmt.Errorf("delete batch: %w", err)
					return
				}
				if len(res.Failed) != 0 {
					errs <- fmt.Errorf("delete batch: failed %+v", res.Failed)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for body, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", body, c)
		}
	}
	v, _ := e.srv.Queue("conc")
	if len(seen) != n || !v.Empty() || v.Stats.Deleted != n || v.Stats.Received != n {
		t.Fatalf("seen %d, queue %+v", len(seen), v.Stats)
	}
}

func TestGoneMessageHistory(t *testing.T) {
	e := newEnv(t)
	url := e.queue(t, "hist", map[string]string{"MessageRetentionPeriod": "60"})
	kept := e.send(t, url, "kept")
	got := e.receive(t, url, 1)
	if _, err := e.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: got[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	expired := e.send(t, url, "expires")
	e.clock.Advance(61 * time.Second)
	v, _ := e.srv.Queue("hist")
	fates := map[string]string{}
	for _, h := range v.History {
		fates[h.ID] = h.State
	}
	if fates[kept] != "deleted" || fates[expired] != "expired" {
		t.Fatalf("fates: %v", fates)
	}
	var nf *types.QueueDoesNotExist
	if _, err := e.client.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String("hist"), QueueOwnerAWSAccountId: aws.String("111111111111")}); !errors.As(err, &nf) {
		t.Fatalf("other account: %v", err)
	}
}

// BenchmarkSendReceiveDelete moves messages through the fake with the real
// SDK in batches of 10 (send batch, receive 10, delete batch) and reports
// messages per second.
func BenchmarkSendReceiveDelete(b *testing.B) {
	ctx := context.Background()
	srv, ts := sqsfake.NewTestServer(b)
	url, _ := srv.CreateQueue("bench", nil)
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL))
	entries := make([]types.SendMessageBatchRequestEntry, 10)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(`{"host":"db-1.example.com","diagnostic":"disk-usage"}`)}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			b.Fatal(err)
		}
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil {
			b.Fatal(err)
		}
		del := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			del[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		if len(del) > 0 {
			if _, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(10*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkReceiveDeleteSingle is the unbatched consumer loop: one message
// per ReceiveMessage and one DeleteMessage each.
func BenchmarkReceiveDeleteSingle(b *testing.B) {
	ctx := context.Background()
	srv, ts := sqsfake.NewTestServer(b)
	url, _ := srv.CreateQueue("bench1", nil)
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL))
	for b.Loop() {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")}); err != nil {
			b.Fatal(err)
		}
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		if err != nil || len(out.Messages) != 1 {
			b.Fatal(err)
		}
		if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
