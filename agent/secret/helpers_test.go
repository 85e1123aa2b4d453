package secret

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

// countingSM answers every GetSecretValue with the same string and counts.
type countingSM struct{ calls atomic.Int64 }

func (c *countingSM) GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.calls.Add(1)
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String("v")}, nil
}

var _ SecretsManagerAPI = (*countingSM)(nil)
