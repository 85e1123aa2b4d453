package cwfake_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/internal/fake/cwfake"
)

func TestPutMetricDataRecordsAgentDatum(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if err := put(ctx, e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 42)}); err != nil {
		t.Fatalf("PutMetricData: %v", err)
	}
	e.clock.Add(time.Minute)
	if err := put(ctx, e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 102)}); err != nil {
		t.Fatalf("PutMetricData: %v", err)
	}

	data := e.srv.Data()
	if len(data) != 2 {
		t.Fatalf("Data() = %d datums, want 2", len(data))
	}
	for i, want := range []struct {
		value    float64
		received time.Time
	}{{42, epoch}, {102, epoch.Add(time.Minute)}} {
		d := data[i]
		if d.Namespace != "autodiag" || d.MetricName != "DrainSeconds" || d.Unit != "Seconds" || d.Value != want.value {
			t.Errorf("datum %d = %+v", i, d)
		}
		if asg, ok := d.Dimension("AutoScalingGroupName"); !ok || asg != "asg-1" {
			t.Errorf("datum %d AutoScalingGroupName = %q, %v", i, asg, ok)
		}
		if !d.Received.Equal(want.received) || !d.Time().Equal(want.received) {
			t.Errorf("datum %d received %v (Time %v), want %v", i, d.Received, d.Time(), want.received)
		}
		if d.Seq != i+1 || !d.Timestamp.IsZero() || d.StatisticValues != nil || d.Values != nil {
			t.Errorf("datum %d = %+v", i, d)
		}
	}
	calls := e.srv.Calls()
	if len(calls) != 2 || calls[0].Op != "PutMetricData" || calls[0].Status != 200 || calls[0].Attempt != 1 ||
		calls[0].Datums != 1 || calls[0].InvocationID == "" || calls[0].ErrorCode != "" {
		t.Errorf("Calls() = %+v", calls)
	}
	if got := cwfake.Named(data, "DrainSeconds"); len(got) != 2 {
		t.Errorf("Named(DrainSeconds) = %d datums, want 2", len(got))
	}
	if got := cwfake.Named(data, "LimiterDegraded"); len(got) != 0 {
		t.Errorf("Named(LimiterDegraded) = %d datums, want 0", len(got))
	}
}

func TestPutMetricDataEveryMember(t *testing.T) {
	e := newEnv(t)
	ts := epoch.Add(-time.Hour + 250*time.Millisecond)
	data := []cwtypes.MetricDatum{
		{
			MetricName:        aws.String("Latency"),
			Timestamp:         aws.Time(ts),
			StatisticValues:   &cwtypes.StatisticSet{SampleCount: aws.Float64(4), Sum: aws.Float64(10), Minimum: aws.Float64(1), Maximum: aws.Float64(4)},
			Unit:              cwtypes.StandardUnitMilliseconds,
			StorageResolution: aws.Int32(1),
		},
		{
			MetricName: aws.String("Sizes"),
			Values:     []float64{1, 2.5, -3},
			Counts:     []float64{1, 2, 3},
			Unit:       cwtypes.StandardUnitBytes,
		},
		{MetricName: aws.String("NoUnit"), Value: aws.Float64(0)},
	}
	if err := put(t.Context(), e.client, "Custom/App #1", data); err != nil {
		t.Fatalf("PutMetricData: %v", err)
	}
	got := e.srv.Data()
	if len(got) != 3 {
		t.Fatalf("Data() = %d datums, want 3", len(got))
	}
	if d := got[0]; !d.Timestamp.Equal(ts) || !d.Time().Equal(ts) || d.StorageResolution != 1 || d.Unit != "Milliseconds" ||
		*d.StatisticValues != (cwfake.StatisticSet{SampleCount: 4, Sum: 10, Minimum: 1, Maximum: 4}) {
		t.Errorf("datum 0 = %+v (stats %+v)", d, d.StatisticValues)
	}
	if d := got[1]; fmt.Sprint(d.Values, d.Counts) != "[1 2.5 -3] [1 2 3]" || d.Unit != "Bytes" || d.StorageResolution != 0 {
		t.Errorf("datum 1 = %+v", d)
	}
	if d := got[2]; d.Unit != "" || d.Value != 0 || d.Namespace != "Custom/App #1" || d.Dimensions != nil {
		t.Errorf("datum 2 = %+v", d)
	}
}

// TestPutMetricDataLargeRequestIsCompressed sends the most datums a request
// may carry: the SDK gzips a body this large, and the fake inflates it.
func TestPutMetricDataLargeRequestIsCompressed(t *testing.T) {
	e := newEnv(t)
	data := make([]cwtypes.MetricDatum, cwfake.MaxDatums)
	for i := range data {
		data[i] = agentDatum(fmt.Sprintf("M%04d", i), float64(i))
	}
	if err := put(t.Context(), e.client, "autodiag", data); err != nil {
		t.Fatalf("PutMetricData: %v", err)
	}
	got := e.srv.Data()
	if len(got) != cwfake.MaxDatums || got[999].MetricName != "M0999" || got[999].Value != 999 {
		t.Fatalf("Data() = %d datums, last %+v", len(got), got[len(got)-1])
	}
	if c := e.srv.Calls(); c[0].ContentEncoding != "gzip" {
		t.Errorf("Content-Encoding = %q, want gzip (the SDK compresses large bodies)", c[0].ContentEncoding)
	}
}

func TestPutMetricDataValidation(t *testing.T) {
	good := func() cwtypes.MetricDatum { return agentDatum("DrainSeconds", 1) }
	with := func(f func(*cwtypes.MetricDatum)) []cwtypes.MetricDatum {
		d := good()
		f(&d)
		return []cwtypes.MetricDatum{d}
	}
	dims := func(n int) []cwtypes.Dimension {
		out := make([]cwtypes.Dimension, n)
		for i := range out {
			out[i] = cwtypes.Dimension{Name: aws.String(fmt.Sprintf("D%d", i)), Value: aws.String("v")}
		}
		return out
	}
	many := make([]cwtypes.MetricDatum, cwfake.MaxDatums+1)
	for i := range many {
		many[i] = good()
	}
	noValidation := []func(*cloudwatch.Options){withoutClientValidation}

	var (
		invalid     *cwtypes.InvalidParameterValueException
		missing     *cwtypes.MissingRequiredParameterException
		combination *cwtypes.InvalidParameterCombinationException
	)
	tests := []struct {
		name     string
		in       *cloudwatch.PutMetricDataInput
		opts     []func(*cloudwatch.Options)
		code     string
		target   any
		contains string
	}{
		{"reserved namespace", &cloudwatch.PutMetricDataInput{Namespace: aws.String("AWS/EC2"), MetricData: []cwtypes.MetricDatum{good()}},
			nil, "InvalidParameterValue", &invalid, "parameter Namespace"},
		{"namespace character", &cloudwatch.PutMetricDataInput{Namespace: aws.String("auto$diag"), MetricData: []cwtypes.MetricDatum{good()}},
			nil, "InvalidParameterValue", &invalid, "parameter Namespace"},
		{"blank namespace", &cloudwatch.PutMetricDataInput{Namespace: aws.String("   "), MetricData: []cwtypes.MetricDatum{good()}},
			nil, "InvalidParameterValue", &invalid, "parameter Namespace"},
		{"namespace too long", &cloudwatch.PutMetricDataInput{Namespace: aws.String(strings.Repeat("n", 256)), MetricData: []cwtypes.MetricDatum{good()}},
			nil, "InvalidParameterValue", &invalid, "parameter Namespace"},
		{"missing namespace", &cloudwatch.PutMetricDataInput{MetricData: []cwtypes.MetricDatum{good()}},
			noValidation, "MissingParameter", &missing, "The parameter Namespace is required."},
		{"missing metric data", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag")},
			nil, "MissingParameter", &missing, "MetricData"},
		{"missing metric name", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.MetricName = nil })},
			noValidation, "MissingParameter", &missing, "The parameter MetricData.member.1.MetricName is required."},
		{"missing dimension value", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Dimensions[0].Value = nil })},
			noValidation, "MissingParameter", &missing, "MetricData.member.1.Dimensions.member.1.Value"},
		{"empty metric name", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.MetricName = aws.String("") })},
			nil, "InvalidParameterValue", &invalid, "MetricData.member.1.MetricName"},
		{"metric name too long", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.MetricName = aws.String(strings.Repeat("m", 256)) })},
			nil, "InvalidParameterValue", &invalid, "MetricData.member.1.MetricName"},
		{"31 dimensions", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Dimensions = dims(cwfake.MaxDimensions + 1) })},
			nil, "InvalidParameterValue", &invalid, "Dimensions must not have a size greater than 30"},
		{"dimension name with colon", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Dimensions[0].Name = aws.String(":asg") })},
			nil, "InvalidParameterValue", &invalid, "Dimensions.member.1.Name"},
		{"blank dimension value", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Dimensions[0].Value = aws.String(" ") })},
			nil, "InvalidParameterValue", &invalid, "Dimensions.member.1.Value"},
		{"1001 datums", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"), MetricData: many},
			nil, "InvalidParameterValue", &invalid, "MetricData must not have a size greater than 1000"},
		{"NaN", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value = aws.Float64(math.NaN()) })},
			nil, "InvalidParameterValue", &invalid, "MetricData.member.1.Value"},
		{"+Inf", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value = aws.Float64(math.Inf(1)) })},
			nil, "InvalidParameterValue", &invalid, "MetricData.member.1.Value"},
		{"-Inf in Values", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value, d.Values = nil, []float64{1, math.Inf(-1)} })},
			nil, "InvalidParameterValue", &invalid, "MetricData.member.1.Values.member.2"},
		{"above 2^360", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value = aws.Float64(math.Ldexp(1, 361)) })},
			nil, "InvalidParameterValue", &invalid, "MetricData.member.1.Value"},
		{"unit outside the set", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Unit = "Parsecs" })},
			nil, "InvalidParameterValue", &invalid, "The value Parsecs for parameter MetricData.member.1.Unit is invalid."},
		{"value and statistics", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) {
				d.StatisticValues = &cwtypes.StatisticSet{SampleCount: aws.Float64(1), Sum: aws.Float64(1), Minimum: aws.Float64(1), Maximum: aws.Float64(1)}
			})},
			nil, "InvalidParameterCombination", &combination, "mutually exclusive"},
		{"no value", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value = nil })},
			nil, "InvalidParameterCombination", &combination, "At least one of"},
		{"151 values", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value, d.Values = nil, make([]float64, cwfake.MaxValues+1) })},
			nil, "InvalidParameterValue", &invalid, "Values must not have a size greater than 150"},
		{"counts not matching values", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Value, d.Values, d.Counts = nil, []float64{1, 2}, []float64{1} })},
			nil, "InvalidParameterValue", &invalid, "same size"},
		{"storage resolution", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.StorageResolution = aws.Int32(5) })},
			nil, "InvalidParameterValue", &invalid, "StorageResolution"},
		{"timestamp too old", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Timestamp = aws.Time(epoch.Add(-15 * 24 * time.Hour)) })},
			nil, "InvalidParameterValue", &invalid, "two weeks in the past"},
		{"timestamp too far ahead", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			MetricData: with(func(d *cwtypes.MetricDatum) { d.Timestamp = aws.Time(epoch.Add(3 * time.Hour)) })},
			nil, "InvalidParameterValue", &invalid, "two hours in the future"},
		{"entity metric data", &cloudwatch.PutMetricDataInput{Namespace: aws.String("autodiag"),
			EntityMetricData: []cwtypes.EntityMetricData{{MetricData: []cwtypes.MetricDatum{good()}}}},
			nil, "InvalidParameterValue", &invalid, "EntityMetricData"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.client.PutMetricData(t.Context(), tt.in, tt.opts...)
			var api smithy.APIError
			if !errors.As(err, &api) {
				t.Fatalf("PutMetricData error = %v, want an API error", err)
			}
			if api.ErrorCode() != tt.code || api.ErrorFault() != smithy.FaultClient {
				t.Errorf("code %q fault %v, want %q client", api.ErrorCode(), api.ErrorFault(), tt.code)
			}
			if !errors.As(err, tt.target) {
				t.Errorf("error %T is not %T", api, tt.target)
			}
			if !strings.Contains(api.ErrorMessage(), tt.contains) {
				t.Errorf("message %q does not contain %q", api.ErrorMessage(), tt.contains)
			}
			if d := e.srv.Data(); len(d) != 0 {
				t.Errorf("rejected request recorded %d datums", len(d))
			}
			// A validation error is final: the SDK does not retry it.
			if c := e.srv.Calls(); len(c) != 1 || c[0].Status != 400 || c[0].ErrorCode != tt.code {
				t.Errorf("Calls() = %+v, want one 400 %s", c, tt.code)
			}
		})
	}
}

func TestPutMetricDataThrottlingIsRetried(t *testing.T) {
	e := newEnv(t)
	id := e.srv.ThrottleNext(2)
	if err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 630)}); err != nil {
		t.Fatalf("PutMetricData: %v", err)
	}
	if n := e.srv.FaultFired(id); n != 2 {
		t.Errorf("FaultFired = %d, want 2", n)
	}
	calls := e.srv.Calls()
	if len(calls) != 3 {
		t.Fatalf("Calls() = %d, want 3 attempts", len(calls))
	}
	for i, c := range calls {
		if c.InvocationID != calls[0].InvocationID || c.Attempt != i+1 {
			t.Errorf("call %d: invocation %q attempt %d, want one SDK call's attempt %d", i, c.InvocationID, c.Attempt, i+1)
		}
	}
	for _, c := range calls[:2] {
		if c.Status != 400 || c.ErrorCode != "Throttling" || c.Fault != cwfake.FaultThrottle || c.Datums != 0 {
			t.Errorf("throttled call = %+v", c)
		}
	}
	if calls[2].Status != 200 || calls[2].Datums != 1 {
		t.Errorf("last call = %+v", calls[2])
	}
	if got := e.backoff.decisions(); fmt.Sprint(got) != "[true true]" {
		t.Errorf("retry decisions (throttle?) = %v, want [true true]", got)
	}
	if d := e.srv.Data(); len(d) != 1 || d[0].Value != 630 {
		t.Errorf("Data() = %+v", d)
	}
}

func TestPutMetricDataThrottlingExhaustsRetries(t *testing.T) {
	e := newEnv(t)
	e.srv.InjectFault(cwfake.Fault{Kind: cwfake.FaultThrottle})
	err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 1)})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "Throttling" || api.ErrorMessage() != "Rate exceeded" {
		t.Fatalf("error = %v, want Throttling", err)
	}
	var maxErr *retry.MaxAttemptsError
	if !errors.As(err, &maxErr) || maxErr.Attempt != 3 {
		t.Errorf("error = %v, want MaxAttemptsError after 3 attempts", err)
	}
	if n := len(e.srv.Calls()); n != 3 {
		t.Errorf("Calls() = %d, want 3", n)
	}
	if n := len(e.srv.Data()); n != 0 {
		t.Errorf("throttled requests recorded %d datums", n)
	}
	e.srv.ClearFaults()
	if err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 2)}); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestPutMetricDataServerErrors(t *testing.T) {
	tests := []struct {
		kind   cwfake.FaultKind
		status int
		code   string
	}{
		{cwfake.FaultServerError, 500, "InternalServiceError"},
		{cwfake.FaultUnavailable, 503, "ServiceUnavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			e := newEnv(t)
			id := e.srv.InjectFault(cwfake.Fault{Kind: tt.kind, Count: 1})
			if err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 1)}); err != nil {
				t.Fatalf("PutMetricData after one %d: %v", tt.status, err)
			}
			calls := e.srv.Calls()
			if len(calls) != 2 || calls[0].Status != tt.status || calls[0].ErrorCode != tt.code || calls[0].Fault != tt.kind ||
				calls[1].Status != 200 || calls[1].Attempt != 2 {
				t.Errorf("Calls() = %+v", calls)
			}
			if got := e.backoff.decisions(); fmt.Sprint(got) != "[false]" {
				t.Errorf("retry decisions (throttle?) = %v, want one non-throttle retry", got)
			}
			if e.srv.FaultFired(id) != 1 || len(e.srv.Data()) != 1 {
				t.Errorf("fired %d, data %d", e.srv.FaultFired(id), len(e.srv.Data()))
			}
		})
	}

	t.Run("persistent 500 is the typed fault", func(t *testing.T) {
		e := newEnv(t)
		e.srv.InjectFault(cwfake.Fault{Kind: cwfake.FaultServerError})
		err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", 1)})
		var fault *cwtypes.InternalServiceFault
		if !errors.As(err, &fault) || fault.ErrorCode() != "InternalServiceError" || fault.ErrorMessage() != "Internal service error" ||
			fault.ErrorFault() != smithy.FaultServer {
			t.Fatalf("error = %v, want *types.InternalServiceFault with its Message", err)
		}
		if n := len(e.srv.Calls()); n != 3 {
			t.Errorf("Calls() = %d, want 3 attempts", n)
		}
	})
}

// TestFaultSkipAndRemove checks Skip lets requests through before the fault
// arms, and RemoveFault disarms it.
func TestFaultSkipAndRemove(t *testing.T) {
	e := newEnv(t)
	noRetry := func(o *cloudwatch.Options) { o.RetryMaxAttempts = 1 }
	id := e.srv.InjectFault(cwfake.Fault{Kind: cwfake.FaultThrottle, Skip: 1})
	var errs []bool
	for range 3 {
		errs = append(errs, put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("X", 1)}, noRetry) != nil)
		if len(errs) == 2 {
			e.srv.RemoveFault(id)
		}
	}
	if fmt.Sprint(errs) != "[false true false]" {
		t.Errorf("failed = %v, want [false true false]", errs)
	}
	if e.srv.FaultFired(id) != 0 {
		t.Errorf("FaultFired after RemoveFault = %d, want 0", e.srv.FaultFired(id))
	}
}

// TestFaultProbabilityIsSeeded checks that a fraction of requests fails and
// that the same seed fails the same requests.
func TestFaultProbabilityIsSeeded(t *testing.T) {
	const n = 40
	pattern := func(seed uint64) string {
		e := newEnv(t, cwfake.WithSeed(seed))
		e.srv.InjectFault(cwfake.Fault{Kind: cwfake.FaultServerError, Probability: 0.5})
		noRetry := func(o *cloudwatch.Options) { o.RetryMaxAttempts = 1 }
		var b strings.Builder
		for range n {
			if err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("X", 1)}, noRetry); err != nil {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b := pattern(7), pattern(7)
	if a != b {
		t.Errorf("same seed, different faults:\n%s\n%s", a, b)
	}
	if k := strings.Count(a, "x"); k == 0 || k == n {
		t.Errorf("%d of %d requests failed with probability 0.5: %s", k, n, a)
	}
	if c := pattern(8); c == a {
		t.Errorf("seeds 7 and 8 failed the same requests: %s", a)
	}
}

func TestWait(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	done := make(chan error, 1)
	go func() {
		done <- e.srv.Wait(ctx, func(d []cwfake.Datum) bool {
			ds := cwfake.Named(d, "DrainSeconds")
			return len(ds) > 0 && ds[len(ds)-1].Value >= 660
		})
	}()
	for i := range 12 {
		if err := put(ctx, e.client, "autodiag", []cwtypes.MetricDatum{agentDatum("DrainSeconds", float64(60*i))}); err != nil {
			t.Fatalf("PutMetricData: %v", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}

	if err := e.srv.WaitCalls(ctx, func(c []cwfake.Call) bool { return len(c) == 12 }); err != nil {
		t.Errorf("WaitCalls: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := e.srv.Wait(cctx, func(d []cwfake.Datum) bool { return len(d) > 100 })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "12 datums") {
		t.Errorf("Wait on a cancelled context = %v, want context.Canceled after 12 datums", err)
	}

	e.srv.Reset()
	if len(e.srv.Data()) != 0 || len(e.srv.Calls()) != 0 {
		t.Errorf("Reset left data or calls")
	}
}

// TestConcurrentPublishers checks that requests racing each other are all
// recorded, each with its own sequence number.
func TestConcurrentPublishers(t *testing.T) {
	e := newEnv(t)
	const workers, each = 4, 25
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				if err := put(t.Context(), e.client, "autodiag", []cwtypes.MetricDatum{agentDatum(fmt.Sprintf("W%d", w), float64(i))}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("PutMetricData: %v", err)
		}
	}
	data := e.srv.Data()
	seen := map[int]bool{}
	for _, d := range data {
		seen[d.Seq] = true
	}
	if len(data) != workers*each || len(seen) != workers*each {
		t.Errorf("%d datums with %d distinct Seq, want %d", len(data), len(seen), workers*each)
	}
	for w := range workers {
		if n := len(cwfake.Named(data, fmt.Sprintf("W%d", w))); n != each {
			t.Errorf("W%d: %d datums, want %d", w, n, each)
		}
	}
}
