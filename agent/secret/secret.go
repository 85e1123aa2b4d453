package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// SecretsManagerAPI is the Secrets Manager call Fetch makes
// (GetSecretValue of the current version): the SecretString, nil when the
// secret holds binary data. region "" is the client's.
type SecretsManagerAPI interface {
	GetSecretString(ctx context.Context, id, region string) (*string, error)
}

// SSMAPI is the Parameter Store call Fetch makes (GetParameter with
// decryption): the value, nil when the answer holds none. region "" is the
// client's.
type SSMAPI interface {
	GetParameterValue(ctx context.Context, name, region string) (*string, error)
}

// Clients are the AWS clients Fetch may use; only the one the reference
// needs must be set. NewClients builds both from an aws.Config.
type Clients struct {
	SecretsManager SecretsManagerAPI
	SSM            SSMAPI
}

// Kinds of reference.
const (
	KindSecretsManager = "secretsmanager"
	KindSSM            = "ssm"
)

// JSONKey is the key read from a secret whose value is a JSON object.
const JSONKey = "url"

// ErrBadRef is returned (wrapped) for a reference that is neither a Secrets
// Manager secret ARN nor an SSM parameter name or ARN.
var ErrBadRef = errors.New("not a Secrets Manager secret ARN (arn:aws:secretsmanager:…:secret:…) or an SSM parameter name (/…) or ARN (arn:aws:ssm:…:parameter/…)")

// Ref is a parsed reference.
type Ref struct {
	Kind string // KindSecretsManager or KindSSM
	// ID is what the API is asked for: the secret ARN, or the parameter
	// name or ARN.
	ID string
	// Region is the ARN's region; "" for a parameter name (the client's
	// region applies).
	Region string
}

// ParseRef checks ref's shape without calling AWS, so configuration
// validation can reject a typo before the agent starts.
func ParseRef(ref string) (Ref, error) {
	if strings.HasPrefix(ref, "/") {
		if len(ref) < 2 || strings.ContainsAny(ref, " \t\n") {
			return Ref{}, fmt.Errorf("secret %q: %w", ref, ErrBadRef)
		}
		return Ref{Kind: KindSSM, ID: ref}, nil
	}
	// arn:partition:service:region:account:resource
	f := strings.SplitN(ref, ":", 6)
	if len(f) == 6 && f[0] == "arn" && strings.HasPrefix(f[1], "aws") && f[3] != "" && f[4] != "" {
		switch {
		case f[2] == "secretsmanager" && strings.HasPrefix(f[5], "secret:") && len(f[5]) > len("secret:"):
			return Ref{Kind: KindSecretsManager, ID: ref, Region: f[3]}, nil
		case f[2] == "ssm" && strings.HasPrefix(f[5], "parameter/") && len(f[5]) > len("parameter/"):
			return Ref{Kind: KindSSM, ID: ref, Region: f[3]}, nil
		}
	}
	return Ref{}, fmt.Errorf("secret %q: %w", ref, ErrBadRef)
}

// Fetch returns the value ref names: a Secrets Manager secret's
// SecretString (or, when that is a JSON object, its "url" member), or an
// SSM parameter's value decrypted. An ARN's region is used for the call,
// whatever the client's region. ctx bounds the call.
func Fetch(ctx context.Context, ref string, c Clients) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	var v string
	switch r.Kind {
	case KindSecretsManager:
		v, err = fetchSecret(ctx, r, c.SecretsManager)
	default:
		v, err = fetchParameter(ctx, r, c.SSM)
	}
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", ref, err)
	}
	if strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("secret %s: the value is empty", ref)
	}
	return v, nil
}

func fetchSecret(ctx context.Context, r Ref, c SecretsManagerAPI) (string, error) {
	if c == nil {
		return "", errors.New("no Secrets Manager client")
	}
	s, err := c.GetSecretString(ctx, r.ID, r.Region)
	if err != nil {
		return "", fmt.Errorf("get secret value: %w", err)
	}
	if s == nil {
		return "", errors.New("the secret holds binary data, not a SecretString")
	}
	return fromJSON(*s)
}

// fromJSON returns s, or its "url" member when s is a JSON object (the
// console's key/value secrets are stored that way). Its errors never quote
// s: a JSON syntax error message would show part of it.
func fromJSON(s string) (string, error) {
	if !strings.HasPrefix(strings.TrimSpace(s), "{") {
		return s, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &obj) != nil {
		return "", errors.New("the SecretString starts with '{' but is not a JSON object")
	}
	raw, ok := obj[JSONKey]
	if !ok {
		return "", fmt.Errorf("the SecretString is a JSON object without a %q key", JSONKey)
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", fmt.Errorf("the SecretString's %q member is not a string", JSONKey)
	}
	return v, nil
}

func fetchParameter(ctx context.Context, r Ref, c SSMAPI) (string, error) {
	if c == nil {
		return "", errors.New("no SSM client")
	}
	v, err := c.GetParameterValue(ctx, r.ID, r.Region)
	if err != nil {
		return "", fmt.Errorf("get parameter: %w", err)
	}
	if v == nil {
		return "", errors.New("the answer holds no parameter value")
	}
	return *v, nil
}
