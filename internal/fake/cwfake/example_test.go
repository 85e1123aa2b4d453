package cwfake_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/fake/cwfake"
)

// A publisher under test keeps putting DrainSeconds while the first two
// attempts are throttled; the test waits until the value it cares about
// has arrived, then reads what was recorded and when.
func Example() {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	srv := cwfake.New(cwfake.WithClock(clock.Func(func() time.Time { return start })))
	ts := httptest.NewServer(srv)
	defer ts.Close()

	// The SDK's standard retryer decides what to retry; only its backoff is
	// zeroed so the example does not wait it out.
	client := cloudwatch.NewFromConfig(cwfake.SDKConfig(ts.URL), func(o *cloudwatch.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
	})
	srv.ThrottleNext(2)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{
		Namespace: aws.String("autodiag"),
		MetricData: []cwtypes.MetricDatum{{
			MetricName: aws.String("DrainSeconds"),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("AutoScalingGroupName"), Value: aws.String("asg-1")}},
			Unit:       cwtypes.StandardUnitSeconds,
			Value:      aws.Float64(720),
		}},
	})
	if err != nil {
		fmt.Println("PutMetricData:", err)
		return
	}

	err = srv.Wait(ctx, func(data []cwfake.Datum) bool {
		ds := cwfake.Named(data, "DrainSeconds")
		return len(ds) > 0 && ds[len(ds)-1].Value >= 720
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range srv.Calls() {
		fmt.Println("attempt", c.Attempt, c.Status, cmp.Or(c.ErrorCode, "OK"))
	}
	for _, d := range srv.Data() {
		asg, _ := d.Dimension("AutoScalingGroupName")
		fmt.Println(d.Namespace, d.MetricName, asg, d.Value, d.Unit, d.Received.Format(time.RFC3339))
	}
	// Output:
	// attempt 1 400 Throttling
	// attempt 2 400 Throttling
	// attempt 3 200 OK
	// autodiag DrainSeconds asg-1 720 Seconds 2026-03-01T12:00:00Z
}
