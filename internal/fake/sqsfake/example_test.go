package sqsfake_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// The fake behind the real SDK client: send, receive, delete, then check that
// nothing is left in the queue. In tests, sqsfake.NewTestServer(t) does the
// first three lines and the cleanup.
func Example() {
	srv := sqsfake.New()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	srv.SetBaseURL(ts.URL)
	url, _ := srv.CreateQueue("tasks", map[string]string{"VisibilityTimeout": "60"})

	ctx := context.Background()
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL)) // or AWS_ENDPOINT_URL_SQS=ts.URL
	_, _ = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"id":"t1"}`)})
	out, _ := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	for _, m := range out.Messages {
		fmt.Println(aws.ToString(m.Body))
		_, _ = client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	}
	v, _ := srv.Queue("tasks")
	fmt.Println("all deleted:", v.Empty(), "deliveries:", v.Stats.Received)
	fmt.Println("requests:", srv.Counters())
	// Output:
	// {"id":"t1"}
	// all deleted: true deliveries: 1
	// requests: map[DeleteMessage:1 ReceiveMessage:1 SendMessage:1]
}
