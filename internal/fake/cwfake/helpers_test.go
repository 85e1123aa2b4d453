package cwfake_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/fake/cwfake"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// backoffLog records the SDK retryer's decisions: every retry it schedules
// and whether the SDK classified the error as a throttle.
type backoffLog struct {
	mu       sync.Mutex
	throttle []bool
}

func (b *backoffLog) BackoffDelay(_ int, err error) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.throttle = append(b.throttle, retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary)
	return 0, nil // no real waiting; the retry decision is the SDK's own
}

func (b *backoffLog) decisions() []bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bool(nil), b.throttle...)
}

type env struct {
	srv     *cwfake.Server
	client  *cloudwatch.Client
	clock   *clock.Manual
	backoff *backoffLog
	url     string
}

// newEnv starts a fake on a test clock and an SDK client with the standard
// retryer (3 attempts, no backoff delay, no retry quota so faults never run
// the bucket dry across subtests).
func newEnv(t *testing.T, opts ...cwfake.Option) *env {
	t.Helper()
	clock := clock.NewManual(epoch)
	srv, ts := cwfake.NewTestServer(t, append([]cwfake.Option{cwfake.WithClock(clock)}, opts...)...)
	bl := &backoffLog{}
	client := cloudwatch.NewFromConfig(cwfake.SDKConfig(ts.URL), func(o *cloudwatch.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = bl
			so.RateLimiter = ratelimit.None
		})
	})
	return &env{srv: srv, client: client, clock: clock, backoff: bl, url: ts.URL}
}

// withoutClientValidation removes the SDK's client-side required-member
// checks, so a request missing a required member reaches the server, as it
// would from any client that does not validate.
func withoutClientValidation(o *cloudwatch.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		_, err := s.Initialize.Remove("OperationInputValidation")
		return err
	})
}

// agentDatum is the datum shape autodiag publishes.
func agentDatum(name string, value float64) cwtypes.MetricDatum {
	return cwtypes.MetricDatum{
		MetricName: aws.String(name),
		Dimensions: []cwtypes.Dimension{{Name: aws.String("AutoScalingGroupName"), Value: aws.String("asg-1")}},
		Unit:       cwtypes.StandardUnitSeconds,
		Value:      aws.Float64(value),
	}
}

func put(ctx context.Context, c *cloudwatch.Client, ns string, data []cwtypes.MetricDatum, opts ...func(*cloudwatch.Options)) error {
	_, err := c.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{Namespace: aws.String(ns), MetricData: data}, opts...)
	return err
}
