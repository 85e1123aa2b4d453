// Package awsconf resolves, from an aws.Config and its configuration
// sources, what the SDK's service clients resolve for themselves: the
// retryer, the FIPS and dual-stack endpoint variants, a service's
// configured endpoint and the FIPS pseudo-regions. The project's small
// REST clients (secrets in agent/secret, S3 in agent/hooks) share it, so
// they behave as the SDK's clients they stand in for.
package awsconf

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// Retryer is the retryer the SDK's clients resolve from cfg.
func Retryer(cfg aws.Config) aws.RetryerV2 {
	var r aws.Retryer
	switch {
	case cfg.Retryer != nil:
		r = cfg.Retryer()
	case cfg.RetryMode == aws.RetryModeAdaptive:
		r = retry.NewAdaptiveMode()
	default:
		r = retry.NewStandard()
	}
	if cfg.RetryMaxAttempts != 0 {
		r = retry.AddWithMaxAttempts(r, cfg.RetryMaxAttempts)
	}
	if v2, ok := r.(aws.RetryerV2); ok {
		return v2
	}
	return retryerV2{r}
}

type retryerV2 struct{ aws.Retryer }

func (r retryerV2) GetAttemptToken(context.Context) (func(error) error, error) {
	return r.GetInitialToken(), nil
}

type (
	fipsSource interface {
		GetUseFIPSEndpoint(context.Context) (aws.FIPSEndpointState, bool, error)
	}
	dualStackSource interface {
		GetUseDualStackEndpoint(context.Context) (aws.DualStackEndpointState, bool, error)
	}
	endpointSource interface {
		GetServiceBaseEndpoint(ctx context.Context, sdkID string) (string, bool, error)
	}
	ignoreEndpointsSource interface {
		GetIgnoreConfiguredEndpoints(context.Context) (bool, bool, error)
	}
)

// EndpointVariants reads use_fips_endpoint and use_dualstack_endpoint
// from the configuration sources (environment, shared config), as the
// SDK's clients do.
func EndpointVariants(ctx context.Context, sources []any) (fips, dualStack bool) {
	for _, s := range sources {
		if p, ok := s.(fipsSource); ok {
			if v, found, err := p.GetUseFIPSEndpoint(ctx); err != nil || found {
				fips = v == aws.FIPSEndpointStateEnabled
				break
			}
		}
	}
	for _, s := range sources {
		if p, ok := s.(dualStackSource); ok {
			if v, found, err := p.GetUseDualStackEndpoint(ctx); err != nil || found {
				dualStack = v == aws.DualStackEndpointStateEnabled
				break
			}
		}
	}
	return fips, dualStack
}

// ServiceEndpoint is the endpoint of the service sdkID from the
// configuration sources (AWS_ENDPOINT_URL_<SERVICE>, the shared config's
// services section), unless they say to ignore configured endpoints.
func ServiceEndpoint(ctx context.Context, sources []any, sdkID string) (string, bool) {
	for _, s := range sources {
		if p, ok := s.(ignoreEndpointsSource); ok {
			if v, found, err := p.GetIgnoreConfiguredEndpoints(ctx); err != nil || found {
				if found && v {
					return "", false
				}
				break
			}
		}
	}
	for _, s := range sources {
		if p, ok := s.(endpointSource); ok {
			v, found, err := p.GetServiceBaseEndpoint(ctx, sdkID)
			if err != nil {
				return "", false
			}
			if found {
				return v, true
			}
		}
	}
	return "", false
}

// FIPSRegion maps a pseudo-region naming FIPS ("fips-us-gov-west-1",
// "us-east-1-fips") to the region and the FIPS flag, as the SDK does.
func FIPSRegion(region string, fips bool) (string, bool) {
	if strings.Contains(region, "fips-") || strings.Contains(region, "-fips") {
		return strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(region, "-fips-", "-"), "fips-", ""), "-fips", ""), true
	}
	return region, fips
}

// Do calls attempt as the SDK's retry middleware does: an attempt token
// before each try, the retry token of the last failure released with the
// next try's result, no retry of an error the retryer calls final, at most
// MaxAttempts tries (then retry.MaxAttemptsError), and the retryer's delay
// between tries, cut short by ctx (then aws.RequestCanceledError). attempt
// gets the try's number, from 1.
func Do(ctx context.Context, r aws.RetryerV2, attempt func(n int) error) error {
	maxAttempts := r.MaxAttempts()
	releaseRetry := func(error) error { return nil }
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		releaseAttempt, err := r.GetAttemptToken(ctx)
		if err != nil {
			return fmt.Errorf("failed to get retry Send token, %w", err)
		}
		err = attempt(n)
		_ = releaseRetry(err)
		_ = releaseAttempt(err)
		if err == nil || !r.IsErrorRetryable(err) {
			return err
		}
		if maxAttempts > 0 && n >= maxAttempts {
			return &retry.MaxAttemptsError{Attempt: n, Err: err}
		}
		rel, terr := r.GetRetryToken(ctx, err)
		if terr != nil {
			return errors.Join(err, terr)
		}
		releaseRetry = rel
		delay, derr := r.RetryDelay(n, err)
		if derr != nil {
			return derr
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return &aws.RequestCanceledError{Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// HostLabel reports whether l is one host-name label of letters, digits
// and '-', not starting with '-' (a region becomes part of a host name).
func HostLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' {
		return false
	}
	for _, ch := range l {
		if !(ch == '-' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			return false
		}
	}
	return true
}
