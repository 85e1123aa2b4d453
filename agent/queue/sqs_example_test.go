package queue_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// The agent builds the client from the SDK's default chain
// (sqs.NewFromConfig(cfg), so AWS_ENDPOINT_URL_SQS works unchanged); here it
// points at the in-process fake.
func ExampleNewSQS() {
	ctx := context.Background()
	srv := sqsfake.New()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	srv.SetBaseURL(ts.URL)
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL))
	created, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("tasks")})
	if err != nil {
		panic(err)
	}

	q := queue.NewSQS(client, queue.SQSOptions{
		QueueURL:          aws.ToString(created.QueueUrl),
		WaitTime:          time.Second,
		VisibilityTimeout: time.Minute,
	})
	defer q.Close(ctx)

	if _, err := q.Send(ctx, []byte(`{"id":"evt-1","host":"web-01.example.com","diagnostic":"disk-usage"}`)); err != nil {
		panic(err)
	}
	msgs, err := q.Receive(ctx, 10)
	if err != nil {
		panic(err)
	}
	m := msgs[0]
	fmt.Println(string(m.Body), "receive", m.ReceiveCount)
	_ = q.ChangeVisibility(ctx, m, 2*time.Minute) // a long task: keep it hidden
	fmt.Println("delete:", q.Delete(ctx, m))
	// Output:
	// {"id":"evt-1","host":"web-01.example.com","diagnostic":"disk-usage"} receive 1
	// delete: <nil>
}
