package secret

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

// countingSM answers every GetSecretString with the same string and counts.
type countingSM struct{ calls atomic.Int64 }

func (c *countingSM) GetSecretString(context.Context, string, string) (*string, error) {
	c.calls.Add(1)
	return aws.String("v"), nil
}

var _ SecretsManagerAPI = (*countingSM)(nil)

// noBackoff retries at once: the retry tests count attempts, not time.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// testConfig is the SDK configuration the tests build clients from: the
// endpoint url, region, static credentials and the standard retryer
// without its backoff.
func testConfig(url, region string) aws.Config {
	return aws.Config{
		Region:       region,
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI", ""),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = noBackoff{} })
		},
	}
}

// testClients are the package's own clients pointed at url, in region.
func testClients(url, region string) Clients {
	return NewClients(context.Background(), testConfig(url, region))
}

// sdkClients are the real SDK clients built from the same configuration,
// behind the package's interfaces: tests run both against the fake to
// prove the fake, and so the package's client, speak the services'
// protocol.
func sdkClients(cfg aws.Config) Clients {
	return Clients{
		SecretsManager: sdkSM{secretsmanager.NewFromConfig(cfg)},
		SSM:            sdkSSM{ssm.NewFromConfig(cfg)},
	}
}

type sdkSM struct{ c *secretsmanager.Client }

func (s sdkSM) GetSecretString(ctx context.Context, id, region string) (*string, error) {
	var opts []func(*secretsmanager.Options)
	if region != "" {
		opts = append(opts, func(o *secretsmanager.Options) { o.Region = region })
	}
	out, err := s.c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)}, opts...)
	if err != nil {
		return nil, err
	}
	return out.SecretString, nil
}

type sdkSSM struct{ c *ssm.Client }

func (s sdkSSM) GetParameterValue(ctx context.Context, name, region string) (*string, error) {
	var opts []func(*ssm.Options)
	if region != "" {
		opts = append(opts, func(o *ssm.Options) { o.Region = region })
	}
	out, err := s.c.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)}, opts...)
	if err != nil {
		return nil, err
	}
	if out.Parameter == nil {
		return nil, nil
	}
	return out.Parameter.Value, nil
}

var (
	_ SecretsManagerAPI = sdkSM{}
	_ SSMAPI            = sdkSSM{}
	_ SecretsManagerAPI = (*SecretsManagerClient)(nil)
	_ SSMAPI            = (*SSMClient)(nil)
)
