package hooks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"github.com/autodiag/autodiag/agent/internal/awsconf"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/encoding/httpbinding"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/autodiag/autodiag/agent/config"
)

// The two S3 calls (PutObject for the uploads, HeadBucket for `doctor`)
// are made by this small REST client instead of the SDK's service/s3
// package, which is the second largest compile of the agent (~16 CPU s
// and 600 MB cold, the whole S3 API with its customizations) and about a
// megabyte of the stripped binary for two operations. It does what the
// SDK client does with the same aws.Config for these calls — region,
// endpoint (BaseEndpoint, AWS_ENDPOINT_URL_S3 and the shared config's
// services section, FIPS and dual-stack, virtual-hosted or path-style
// addressing), credentials, SigV4 over the body's SHA-256, the retryer,
// the HTTP client — and reports failures with the SDK's error types
// (smithy.OperationError around an awshttp.ResponseError around the API
// error). TestS3ClientMatchesSDK holds its requests to the real SDK
// client's. Not done: S3 Express, access points and Outposts buckets,
// clock-skew correction, the SDK's telemetry.

// PutObjectInput is one object to store.
type PutObjectInput struct {
	Bucket, Key string
	// Body is sent as it is, read in place (no copy).
	Body        []byte
	ContentType string
	// Metadata is the object's user metadata (x-amz-meta-*).
	Metadata map[string]string
	// StorageClass, SSE (config.SSEAES256, config.SSEKMS) and SSEKMSKeyID
	// are S3's values; "" leaves the bucket's default.
	StorageClass, SSE, SSEKMSKeyID string
}

// S3API is the S3 call the uploader makes; *S3Client is the real one.
type S3API interface {
	PutObject(ctx context.Context, in PutObjectInput) error
}

var _ S3API = (*S3Client)(nil)

// S3Client makes the S3 calls of results.s3 (see the comment above).
type S3Client struct {
	region    string
	base      *string // custom endpoint; nil: the region's
	pathStyle bool
	fips      bool
	dualStack bool
	creds     aws.CredentialsProvider // nil: requests go unsigned
	retryer   aws.RetryerV2
	httpc     aws.HTTPClient
	signer    *v4.Signer
}

// NewS3Client is the S3 client of results.s3 from the SDK's config:
// AWS_ENDPOINT_URL_S3 (or the shared config's services section) points it
// elsewhere, PathStyle addresses the bucket in the path. ctx bounds
// reading awsCfg's configuration sources (endpoint overrides, FIPS,
// dual-stack).
func NewS3Client(ctx context.Context, awsCfg aws.Config, c config.S3Config) *S3Client {
	s := &S3Client{region: awsCfg.Region, base: awsCfg.BaseEndpoint, pathStyle: c.PathStyle, httpc: awsCfg.HTTPClient,
		// S3 signs the path as sent: no second escaping.
		signer: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })}
	if s.httpc == nil {
		s.httpc = awshttp.NewBuildableClient()
	}
	if !aws.IsCredentialsProvider(awsCfg.Credentials, (*aws.AnonymousCredentials)(nil)) {
		s.creds = awsCfg.Credentials
	}
	s.retryer = awsconf.Retryer(awsCfg)
	s.fips, s.dualStack = awsconf.EndpointVariants(ctx, awsCfg.ConfigSources)
	// As the SDK: AWS_ENDPOINT_URL alone (already in BaseEndpoint) wins
	// over a services section of the shared config; AWS_ENDPOINT_URL_S3 or
	// an s3 section wins over both.
	_, global := os.LookupEnv("AWS_ENDPOINT_URL")
	_, own := os.LookupEnv("AWS_ENDPOINT_URL_S3")
	if !global || own {
		if u, ok := awsconf.ServiceEndpoint(ctx, awsCfg.ConfigSources, "S3"); ok {
			s.base = &u
		}
	}
	return s
}

// PutObject stores in.Body at in.Bucket/in.Key.
func (s *S3Client) PutObject(ctx context.Context, in PutObjectInput) error {
	sum := sha256.Sum256(in.Body)
	h := http.Header{}
	if in.ContentType != "" {
		h.Set("Content-Type", in.ContentType)
	}
	// S3 checks the body against it (and a bucket with object lock
	// requires a checksum).
	h.Set("X-Amz-Checksum-Sha256", base64.StdEncoding.EncodeToString(sum[:]))
	for k, v := range in.Metadata {
		h.Set("X-Amz-Meta-"+k, v)
	}
	if in.StorageClass != "" {
		h.Set("X-Amz-Storage-Class", in.StorageClass)
	}
	if in.SSE != "" {
		h.Set("X-Amz-Server-Side-Encryption", in.SSE)
	}
	if in.SSEKMSKeyID != "" {
		h.Set("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", in.SSEKMSKeyID)
	}
	return s.call(ctx, "PutObject", http.MethodPut, in.Bucket, in.Key, h, in.Body, hex.EncodeToString(sum[:]))
}

// HeadBucket succeeds when the bucket exists and the credentials may use it.
func (s *S3Client) HeadBucket(ctx context.Context, bucket string) error {
	return s.call(ctx, "HeadBucket", http.MethodHead, bucket, "", nil, nil, emptySHA256)
}

// emptySHA256 is the hex SHA-256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// maxS3Answer bounds the body of an answer read (an error document).
const maxS3Answer = 64 << 10

// call sends one request, retrying as the retryer says; the error is the
// SDK's shape.
func (s *S3Client) call(ctx context.Context, op, method, bucket, key string, h http.Header, body []byte, payloadHash string) error {
	if err := s.send(ctx, op, method, bucket, key, h, body, payloadHash); err != nil {
		return &smithy.OperationError{ServiceID: "S3", OperationName: op, Err: err}
	}
	return nil
}

func (s *S3Client) send(ctx context.Context, op, method, bucket, key string, h http.Header, body []byte, payloadHash string) error {
	region, fips := awsconf.FIPSRegion(s.region, s.fips)
	u, err := s.resolve(region, fips, bucket, key)
	if err != nil {
		return fmt.Errorf("failed to resolve service endpoint, %w", err)
	}
	if key != "" {
		// As the SDK: an object operation names itself in the query.
		u.RawQuery = "x-id=" + op
	}
	return awsconf.Do(ctx, s.retryer, func(int) error {
		return s.attempt(ctx, method, u, region, h, body, payloadHash)
	})
}

// attempt sends the request once.
func (s *S3Client) attempt(ctx context.Context, method string, u *url.URL, region string, h http.Header, body []byte, payloadHash string) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	req.URL = u // keeps RawPath: the path is sent as signed
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.ContentLength = int64(len(body))
	}
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	if s.creds != nil {
		creds, err := s.creds.Retrieve(ctx)
		if err != nil {
			return fmt.Errorf("get identity: get credentials: %w", err)
		}
		if err := s.signer.SignHTTP(ctx, creds, req, payloadHash, "s3", region, time.Now().UTC()); err != nil {
			return fmt.Errorf("sign request: sign http: %w", err)
		}
	}
	resp, err := s.httpc.Do(req)
	if err != nil {
		return &smithyhttp.RequestSendError{Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxS3Answer))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	if rerr != nil {
		return &smithy.DeserializationError{Err: fmt.Errorf("failed to read response body, %w", rerr)}
	}
	return &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: s3APIError(resp.StatusCode, b)},
		RequestID:     resp.Header.Get("X-Amz-Request-Id"),
	}
}

// s3APIError decodes an error answer as the SDK's REST-XML protocol does
// for S3: <Error><Code/><Message/></Error>; an answer without a body (a
// HEAD's) takes its code from the status, as the SDK's HeadBucket does
// (404 NotFound).
func s3APIError(status int, body []byte) error {
	var doc struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		_ = xml.Unmarshal(body, &doc) // an undecodable body leaves the status's code
	}
	if doc.Code == "" {
		doc.Code = strings.ReplaceAll(http.StatusText(status), " ", "")
		if doc.Code == "" {
			doc.Code = "UnknownError"
		}
	}
	if doc.Message == "" {
		doc.Message = doc.Code
	}
	return &smithy.GenericAPIError{Code: doc.Code, Message: doc.Message}
}

// resolve is the URL the SDK's endpoint rules give for bucket and key.
func (s *S3Client) resolve(region string, fips bool, bucket, key string) (*url.URL, error) {
	if bucket == "" {
		return nil, errors.New("endpoint rule error, Invalid Configuration: the bucket is empty")
	}
	var base *url.URL
	virtual := !s.pathStyle && virtualHostable(bucket)
	switch {
	case s.base != nil && fips:
		return nil, errors.New("endpoint rule error, Invalid Configuration: FIPS and custom endpoint are not supported")
	case s.base != nil && s.dualStack:
		return nil, errors.New("endpoint rule error, Invalid Configuration: Cannot set dual-stack in combination with a custom endpoint")
	case s.base != nil:
		u, err := url.Parse(*s.base)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("Failed to parse uri: %s", *s.base) //nolint:staticcheck // the SDK's wording
		}
		// An IP address cannot take the bucket as a label.
		if net.ParseIP(u.Hostname()) != nil {
			virtual = false
		}
		base = u
	case region == "":
		return nil, errors.New("endpoint rule error, Invalid Configuration: Missing Region")
	default:
		if !s3ValidRegion(region) {
			return nil, fmt.Errorf("invalid input region %s", region)
		}
		host := "s3"
		if fips {
			host = "s3-fips"
		}
		if s.dualStack {
			host += ".dualstack"
		}
		base = &url.URL{Scheme: "https", Host: host + "." + region + "." + s3DNSSuffix(region)}
	}
	u := *base
	raw := strings.TrimSuffix(u.EscapedPath(), "/")
	if virtual {
		u.Host = bucket + "." + u.Host
	} else {
		raw += "/" + httpbinding.EscapePath(bucket, true)
	}
	// HeadBucket (no key) sends "/" virtual-hosted, the bare bucket
	// path-style, as the SDK.
	if key != "" {
		raw += "/" + httpbinding.EscapePath(key, false)
	} else if virtual {
		raw += "/"
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return nil, err
	}
	u.Path, u.RawPath = p, raw
	return &u, nil
}

// virtualHostable is S3's test for a bucket that can be a host label over
// TLS: 3–63 lower-case letters, digits and '-', no dots, not an IP.
func virtualHostable(bucket string) bool {
	return s3BucketLabel.MatchString(bucket) && net.ParseIP(bucket) == nil
}

var s3BucketLabel = regexp.MustCompile(`^[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]$`)

// s3DNSSuffix is the DNS suffix of region's partition (the SDK's
// partitions.json): amazonaws.com.cn for China, amazonaws.com for the
// commercial and GovCloud regions. The isolated partitions take their
// endpoint from AWS_ENDPOINT_URL_S3.
func s3DNSSuffix(region string) string {
	if strings.HasPrefix(region, "cn-") {
		return "amazonaws.com.cn"
	}
	return "amazonaws.com"
}

// s3ValidRegion: one host label (S3's regions have no dots).
func s3ValidRegion(r string) bool { return awsconf.HostLabel(r) }
