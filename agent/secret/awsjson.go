package secret

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/autodiag/autodiag/agent/internal/awsconf"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The two calls are made by a small AWS JSON 1.1 client instead of the
// SDK's service/secretsmanager and service/ssm packages: those link about
// 1.4 MB into the stripped binary (mostly the services' schemas) for one
// operation each. The client does what the SDK clients do with the same
// aws.Config — credentials, region, endpoint override (BaseEndpoint,
// AWS_ENDPOINT_URL_<SERVICE>, the shared config's services section), FIPS
// and dual-stack endpoints, the retryer and its token bucket, the HTTP
// client, SigV4 — and reports failures with the SDK's own error types
// (smithy.OperationError around an awshttp.ResponseError around the API
// error), so its errors read and unwrap as the SDK's. Tests hold it to the
// real SDK clients against internal/fake/awssecretsfake. Not done: the SDK's
// telemetry (tracing spans, metrics) and request-metadata headers.

// maxAnswer bounds an answer's body: a secret is at most 64 KiB and a
// parameter 8 KiB, base64 and JSON escaping included this leaves room.
const maxAnswer = 1 << 20

// service is what differs between the two APIs.
type service struct {
	id      string // the SDK's ServiceID: names the service in errors and in the shared config
	signing string // SigV4 signing name, also the endpoint's first label
	target  string // X-Amz-Target prefix
	// modeled are the API errors the service's model declares (for SSM,
	// those GetParameter can answer), with their fault; they print as the
	// SDK's generated error types ("Code: message"), any other code as
	// smithy.GenericAPIError ("api error Code: message").
	modeled map[string]smithy.ErrorFault
	// endpoint is the service's endpoint rule for a region, FIPS and
	// dual-stack (no custom endpoint).
	endpoint func(region string, p partition, fips, dualStack bool) string
}

var secretsManagerService = service{
	id: "Secrets Manager", signing: "secretsmanager", target: "secretsmanager",
	modeled: map[string]smithy.ErrorFault{
		"DecryptionFailure": smithy.FaultClient, "EncryptionFailure": smithy.FaultClient,
		"InternalServiceError": smithy.FaultServer, "InvalidNextTokenException": smithy.FaultClient,
		"InvalidParameterException": smithy.FaultClient, "InvalidRequestException": smithy.FaultClient,
		"LimitExceededException": smithy.FaultClient, "MalformedPolicyDocumentException": smithy.FaultClient,
		"PreconditionNotMetException": smithy.FaultClient, "PublicPolicyException": smithy.FaultClient,
		"ResourceExistsException": smithy.FaultClient, "ResourceNotFoundException": smithy.FaultClient,
	},
	endpoint: func(region string, p partition, fips, dualStack bool) string {
		host := "secretsmanager"
		suffix := p.dns
		switch {
		case fips && dualStack && (p.name == "aws" || p.name == "aws-us-gov"):
			host = "secretsmanager-fips"
		case fips && dualStack:
			host, suffix = "secretsmanager-fips", p.dualStack
		case fips:
			host = "secretsmanager-fips"
		case dualStack && (p.name == "aws" || p.name == "aws-cn" || p.name == "aws-us-gov"):
		case dualStack:
			suffix = p.dualStack
		}
		return "https://" + host + "." + region + "." + suffix
	},
}

var ssmService = service{
	id: "SSM", signing: "ssm", target: "AmazonSSM",
	modeled: map[string]smithy.ErrorFault{
		"AccessDeniedException": smithy.FaultClient, "InternalServerError": smithy.FaultServer,
		"InvalidKeyId": smithy.FaultClient, "ParameterNotFound": smithy.FaultClient,
		"ParameterVersionNotFound": smithy.FaultClient, "ThrottlingException": smithy.FaultClient,
		"ValidationException": smithy.FaultClient,
	},
	endpoint: func(region string, p partition, fips, dualStack bool) string {
		switch {
		case fips && dualStack:
			return "https://ssm-fips." + region + "." + p.dualStack
		case fips && p.name == "aws-us-gov":
			return "https://ssm." + region + ".amazonaws.com"
		case fips:
			return "https://ssm-fips." + region + "." + p.dns
		case dualStack:
			return "https://ssm." + region + "." + p.dualStack
		}
		return "https://ssm." + region + "." + p.dns
	},
}

// NewClients returns the clients Fetch uses, built from cfg as the SDK's
// NewFromConfig would build them; ctx bounds reading cfg's configuration
// sources (endpoint overrides, FIPS, dual-stack).
func NewClients(ctx context.Context, cfg aws.Config) Clients {
	return Clients{
		SecretsManager: &SecretsManagerClient{newJSONClient(ctx, cfg, secretsManagerService)},
		SSM:            &SSMClient{newJSONClient(ctx, cfg, ssmService)},
	}
}

// SecretsManagerClient makes the one Secrets Manager call Fetch needs.
type SecretsManagerClient struct{ c *jsonClient }

// GetSecretString returns the current SecretString of the secret id
// (name or ARN), nil when the secret holds binary data; region "" is the
// configuration's.
func (s *SecretsManagerClient) GetSecretString(ctx context.Context, id, region string) (*string, error) {
	var out struct {
		SecretString *string `json:"SecretString"`
	}
	in := struct {
		SecretID string `json:"SecretId"`
	}{id}
	if err := s.c.call(ctx, "GetSecretValue", region, in, &out); err != nil {
		return nil, err
	}
	return out.SecretString, nil
}

// SSMClient makes the one Parameter Store call Fetch needs.
type SSMClient struct{ c *jsonClient }

// GetParameterValue returns the value of the parameter name (name or
// ARN), decrypted; nil when the answer holds none. region "" is the
// configuration's.
func (s *SSMClient) GetParameterValue(ctx context.Context, name, region string) (*string, error) {
	var out struct {
		Parameter *struct {
			Value *string `json:"Value"`
		} `json:"Parameter"`
	}
	in := struct {
		Name           string `json:"Name"`
		WithDecryption bool   `json:"WithDecryption"`
	}{name, true}
	if err := s.c.call(ctx, "GetParameter", region, in, &out); err != nil {
		return nil, err
	}
	if out.Parameter == nil {
		return nil, nil
	}
	return out.Parameter.Value, nil
}

// jsonClient calls one AWS JSON 1.1 service.
type jsonClient struct {
	svc       service
	region    string
	base      *string // custom endpoint; nil: the service's regional one
	fips      bool
	dualStack bool
	creds     aws.CredentialsProvider // nil: requests go unsigned
	retryer   aws.RetryerV2
	httpc     aws.HTTPClient
	signer    *v4.Signer
	// skew is the host clock's offset from the service's, learnt from
	// answers' Date header; nil: clock-skew correction is disabled.
	skew *atomic.Int64
}

func newJSONClient(ctx context.Context, cfg aws.Config, svc service) *jsonClient {
	c := &jsonClient{svc: svc, region: cfg.Region, base: cfg.BaseEndpoint, httpc: cfg.HTTPClient, signer: v4.NewSigner()}
	if c.httpc == nil {
		c.httpc = awshttp.NewBuildableClient()
	}
	// As the SDK: the provider as configured (LoadDefaultConfig's is
	// cached), none for anonymous credentials.
	if !aws.IsCredentialsProvider(cfg.Credentials, (*aws.AnonymousCredentials)(nil)) {
		c.creds = cfg.Credentials
	}
	c.retryer = awsconf.Retryer(cfg)
	if !cfg.DisableClockSkewCorrection {
		c.skew = new(atomic.Int64)
	}
	c.fips, c.dualStack = awsconf.EndpointVariants(ctx, cfg.ConfigSources)
	// As the SDK: AWS_ENDPOINT_URL alone (already in BaseEndpoint) wins
	// over a services section of the shared config; the service's own
	// variable or section wins over both.
	_, global := os.LookupEnv("AWS_ENDPOINT_URL")
	_, own := os.LookupEnv("AWS_ENDPOINT_URL_" + strings.ToUpper(strings.ReplaceAll(svc.id, " ", "_")))
	if !global || own {
		if u, ok := awsconf.ServiceEndpoint(ctx, cfg.ConfigSources, svc.id); ok {
			c.base = &u
		}
	}
	return c
}

// call sends op with in as its body and decodes the answer into out,
// retrying as the retryer says; the error is the SDK's shape.
func (c *jsonClient) call(ctx context.Context, op, region string, in, out any) error {
	err := c.do(ctx, op, region, in, out)
	if err != nil {
		return &smithy.OperationError{ServiceID: c.svc.id, OperationName: op, Err: err}
	}
	return nil
}

func (c *jsonClient) do(ctx context.Context, op, region string, in, out any) error {
	if region == "" {
		region = c.region
	}
	region, fips := awsconf.FIPSRegion(region, c.fips)
	endpoint, err := c.resolve(region, fips)
	if err != nil {
		return fmt.Errorf("failed to resolve service endpoint, %w", err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	var skew time.Duration // what this attempt signs with
	if c.skew != nil {
		skew = time.Duration(c.skew.Load())
	}
	return awsconf.Do(ctx, c.retryer, func(int) error {
		measured, measuredOK := time.Duration(0), false
		err := c.attempt(ctx, endpoint, op, region, body, out, skew, &measured, &measuredOK)
		if c.skew != nil {
			// As the SDK: an error that a skewed clock explains, when the
			// answer's Date says the clock is off by more than the
			// threshold from what was signed with, is retried signed with
			// the measured offset, and the offset is kept for the next
			// calls.
			err = wrapClockSkew(err, skew, measured, measuredOK)
			skew = measured
			if measuredOK {
				c.skew.Store(int64(measured))
			}
		}
		return err
	})
}

// attempt sends the request once.
// It reports the clock offset the answer's Date header shows, if any.
func (c *jsonClient) attempt(ctx context.Context, endpoint *url.URL, op, region string, body []byte, out any,
	skew time.Duration, measured *time.Duration, measuredOK *bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", c.svc.target+"."+op)
	if c.creds != nil {
		creds, err := c.creds.Retrieve(ctx)
		if err != nil {
			return fmt.Errorf("get identity: get credentials: %w", err)
		}
		sum := sha256.Sum256(body)
		if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), c.svc.signing, region, time.Now().Add(skew).UTC()); err != nil {
			return fmt.Errorf("sign request: sign http: %w", err)
		}
	}
	sent := time.Now()
	resp, err := c.httpc.Do(req)
	if err != nil {
		return &smithyhttp.RequestSendError{Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	*measured, *measuredOK = clockSkew(resp.Header, sent, time.Now())
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return &smithy.DeserializationError{Err: fmt.Errorf("failed to read response body, %w", err)}
	}
	if len(b) > maxAnswer {
		return &smithy.DeserializationError{Err: fmt.Errorf("the answer is larger than %d bytes", maxAnswer)}
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: c.apiError(resp.Header, b)},
			RequestID:     resp.Header.Get("X-Amzn-Requestid"),
		}
	}
	if len(b) == 0 {
		return nil
	}
	// The decoder's error is not kept: it could quote part of the value.
	if json.Unmarshal(b, out) != nil {
		return &smithy.DeserializationError{Err: errors.New("the answer is not a JSON object of the expected shape")}
	}
	return nil
}

// maxTrustedRequest and skewThreshold are the SDK's bounds: a slower
// answer's Date says nothing of the clock; a smaller difference is not
// worth a retry.
const (
	maxTrustedRequest = 15 * time.Minute
	skewThreshold     = 4 * time.Minute
)

// clockSkew is the offset of the host clock the answer's Date shows
// (server time minus receive time), as the SDK measures it: none without a
// Date, from a cache (Age) or after a round trip longer than
// maxTrustedRequest.
func clockSkew(h http.Header, sent, received time.Time) (time.Duration, bool) {
	date := h.Get("Date")
	if date == "" || h.Get("Age") != "" || received.Sub(sent) > maxTrustedRequest {
		return 0, false
	}
	server, err := smithyhttp.ParseTime(date)
	if err != nil {
		return 0, false
	}
	return server.Sub(received), true
}

// clockSkewCodes are the error codes a skewed clock causes.
var clockSkewCodes = map[string]bool{
	"InvalidSignatureException": true, "SignatureDoesNotMatch": true, "AuthFailure": true,
	"RequestTimeTooSkewed": true, "AccessDeniedException": true,
}

// wrapClockSkew marks err retryable when its code is one a skewed clock
// causes and the measured offset differs from the one signed with by more
// than skewThreshold.
func wrapClockSkew(err error, signed, measured time.Duration, ok bool) error {
	var ae interface{ ErrorCode() string }
	if err == nil || !ok || !errors.As(err, &ae) || !clockSkewCodes[ae.ErrorCode()] {
		return err
	}
	if d := signed - measured; d > skewThreshold || d < -skewThreshold {
		return &clockSkewError{err}
	}
	return err
}

// clockSkewError is an error a skewed clock probably caused; the retryer
// retries it (RetryableError).
type clockSkewError struct{ err error }

func (e *clockSkewError) Error() string        { return "Probable clock skew error: " + e.err.Error() }
func (e *clockSkewError) Unwrap() error        { return e.err }
func (e *clockSkewError) RetryableError() bool { return true }

// apiError decodes an error answer as the SDK's JSON 1.1 protocol does:
// the code from X-Amzn-ErrorType, else __type, else code, stripped of a
// namespace ("ns#Code") and of anything after ':'.
func (c *jsonClient) apiError(h http.Header, body []byte) error {
	var info struct {
		Type    string `json:"__type"`
		Message string // either case, as the SDK
		Code    any
	}
	if len(bytes.TrimSpace(body)) > 0 {
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&info); err != nil {
			return &smithy.DeserializationError{Err: fmt.Errorf("failed to decode response body, %w", err)}
		}
	}
	code := "UnknownError"
	if v := h.Get("X-Amzn-ErrorType"); v != "" {
		code = v
	} else if info.Type != "" {
		code = info.Type
	} else if s, ok := info.Code.(string); ok && s != "" {
		code = s
	}
	if i := strings.Index(code, ":"); i >= 0 {
		code = code[:i]
	}
	if i := strings.Index(code, "#"); i >= 0 {
		code = code[i+1:]
	}
	if fault, ok := c.svc.modeled[code]; ok {
		return &ModeledError{Code: code, Message: info.Message, Fault: fault}
	}
	msg := info.Message
	if msg == "" {
		msg = "UnknownError"
	}
	return &smithy.GenericAPIError{Code: code, Message: msg}
}

// ModeledError is an API error the service's model declares (a secret or
// parameter not found, a decryption failure…); it is a smithy.APIError
// and prints as the SDK's generated error types.
type ModeledError struct {
	Code, Message string
	Fault         smithy.ErrorFault
}

func (e *ModeledError) Error() string                 { return e.Code + ": " + e.Message }
func (e *ModeledError) ErrorCode() string             { return e.Code }
func (e *ModeledError) ErrorMessage() string          { return e.Message }
func (e *ModeledError) ErrorFault() smithy.ErrorFault { return e.Fault }

var _ smithy.APIError = (*ModeledError)(nil)

// resolve is the endpoint the SDK's resolver gives for the region.
func (c *jsonClient) resolve(region string, fips bool) (*url.URL, error) {
	var raw string
	switch {
	case c.base != nil && fips:
		return nil, errors.New("endpoint rule error, Invalid Configuration: FIPS and custom endpoint are not supported")
	case c.base != nil && c.dualStack:
		return nil, errors.New("endpoint rule error, Invalid Configuration: Dualstack and custom endpoint are not supported")
	case c.base != nil:
		raw = *c.base
	case region == "":
		return nil, errors.New("endpoint rule error, Invalid Configuration: Missing Region")
	default:
		if !validRegion(region) {
			return nil, fmt.Errorf("invalid input region %s", region)
		}
		raw = c.svc.endpoint(region, partitionOf(region), fips, c.dualStack)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("Failed to parse uri: %s", raw) //nolint:staticcheck // the SDK's wording
	}
	u.Path = smithyhttp.JoinPath(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// validRegion: dot-separated host labels (awsconf.HostLabel).
func validRegion(r string) bool {
	for _, l := range strings.Split(r, ".") {
		if !awsconf.HostLabel(l) {
			return false
		}
	}
	return true
}
