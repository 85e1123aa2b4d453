package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// Serve serves h over HTTP on a free loopback port until close is called;
// url is http://127.0.0.1:PORT.
func Serve(h http.Handler) (url string, close func(), err error) {
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = hs.Close() }, nil
}

// Wrap puts a handler in front of a fake's (a recorder of its calls, say);
// nil leaves the fake's alone.
type Wrap func(http.Handler) http.Handler

func (w Wrap) apply(h http.Handler) http.Handler {
	if w == nil {
		return h
	}
	return w(h)
}

// SQS is an sqsfake server on loopback and an SDK client of it.
type SQS struct {
	*sqsfake.Server
	URL    string
	Client *sqs.Client
	stop   func()
}

// StartSQS serves an SQS fake built with opts, behind wrap.
func StartSQS(wrap Wrap, opts ...sqsfake.Option) (*SQS, error) {
	srv := sqsfake.New(opts...)
	url, stop, err := Serve(wrap.apply(srv))
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("sqs fake: %w", err)
	}
	srv.SetBaseURL(url)
	return &SQS{Server: srv, URL: url, Client: sqs.NewFromConfig(sqsfake.SDKConfig(url)), stop: stop}, nil
}

// Close stops serving and the fake.
func (s *SQS) Close() {
	s.stop()
	s.Server.Close()
}

// Env points a child's SDK at the fake.
func (s *SQS) Env() []string { return []string{"AWS_ENDPOINT_URL_SQS=" + s.URL} }

// Send puts bodies on the queue at url, 10 per SendMessageBatch, and
// returns the message ids in order.
func (s *SQS) Send(ctx context.Context, url string, bodies ...string) ([]string, error) {
	var ids []string
	for len(bodies) > 0 {
		n := min(10, len(bodies))
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, b := range bodies[:n] {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := s.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return ids, fmt.Errorf("send: %w", err)
		}
		if len(out.Failed) > 0 {
			return ids, fmt.Errorf("send: %d entries failed: %+v", len(out.Failed), out.Failed)
		}
		got := make([]string, n)
		for _, e := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(e.Id))
			got[i] = aws.ToString(e.MessageId)
		}
		ids = append(ids, got...)
		bodies = bodies[n:]
	}
	return ids, nil
}

// Pending is what sits on the queue name: visible, in flight or delayed.
func (s *SQS) Pending(name string) int {
	v, i, d, _, _ := s.Stats(name)
	return v + i + d
}

// Drained reports whether every message sent to the queue name was
// deleted.
func (s *SQS) Drained(name string) bool {
	v, i, d, st, ok := s.Stats(name)
	return ok && v == 0 && i == 0 && d == 0 && st.Deleted == st.Sent
}

// Notifier is an Auto Scaling fake's Notify that puts each lifecycle
// notification on the queue at url; onErr, when set, hears of a failed
// send.
func (s *SQS) Notifier(url string, onErr func(error)) func(body string) {
	return func(body string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := s.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
		if err != nil && onErr != nil {
			onErr(fmt.Errorf("sending the lifecycle notification: %w", err))
		}
	}
}

// ASG is an Auto Scaling fake on loopback.
type ASG struct {
	*asgfake.Server
	URL  string
	stop func()
}

// StartASG serves an Auto Scaling fake built with o, behind wrap.
func StartASG(wrap Wrap, o asgfake.Options) (*ASG, error) {
	srv := asgfake.New(o)
	url, stop, err := Serve(wrap.apply(srv))
	if err != nil {
		return nil, fmt.Errorf("auto scaling fake: %w", err)
	}
	return &ASG{Server: srv, URL: url, stop: stop}, nil
}

// Close stops serving.
func (a *ASG) Close() { a.stop() }

// Env points a child's SDK at the fake.
func (a *ASG) Env() []string { return []string{"AWS_ENDPOINT_URL_AUTO_SCALING=" + a.URL} }
