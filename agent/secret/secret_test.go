package secret

import (
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/internal/awssecretsfake"
)

const redisURL = "rediss://autodiag:s3cr3t-Pa55w0rd@redis.internal:6379/0"

// clientKinds are the package's client and the real SDK's, built from
// the same configuration: every Fetch test runs with both.
var clientKinds = []struct {
	name string
	new  func(url, region string) Clients
}{
	{"own", testClients},
	{"sdk", func(url, region string) Clients { return sdkClients(testConfig(url, region)) }},
}

func startFake(t *testing.T) (*awssecretsfake.Server, string) {
	t.Helper()
	fake := awssecretsfake.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

func TestFetch(t *testing.T) {
	fake, url := startFake(t)
	plain := fake.PutSecretString("autodiag/redis-plain", redisURL)
	inJSON := fake.PutSecretString("autodiag/redis-json", `{"url": "`+redisURL+`", "note": "rotated monthly"}`)
	fake.PutParameter("/autodiag/redis-url", redisURL, true)
	paramARN := fake.PutParameter("/autodiag/redis-url-by-arn", redisURL, true)

	tests := []struct {
		name, ref, clientRegion string
		wantTarget              string
	}{
		{"secret string", plain, awssecretsfake.DefaultRegion, awssecretsfake.TargetGetSecretValue},
		{"url member of a JSON secret", inJSON, awssecretsfake.DefaultRegion, awssecretsfake.TargetGetSecretValue},
		{"secret ARN in another region than the client's", plain, "eu-west-1", awssecretsfake.TargetGetSecretValue},
		{"SecureString by name", "/autodiag/redis-url", awssecretsfake.DefaultRegion, awssecretsfake.TargetGetParameter},
		{"SecureString by ARN", paramARN, "eu-west-1", awssecretsfake.TargetGetParameter},
	}
	for _, kind := range clientKinds {
		for _, tc := range tests {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				n := len(fake.Calls())
				got, err := Fetch(t.Context(), tc.ref, kind.new(url, tc.clientRegion))
				if err != nil || got != redisURL {
					t.Fatalf("Fetch = %q, %v; want the URL", got, err)
				}
				calls := fake.Calls()[n:]
				if len(calls) != 1 {
					t.Fatalf("%d calls; want 1: %+v", len(calls), calls)
				}
				c := calls[0]
				if c.Target != tc.wantTarget || c.ID != tc.ref || c.SigningRegion != awssecretsfake.DefaultRegion {
					t.Fatalf("call = %+v; want %s for %s signed for %s (the ARN's region)", c, tc.wantTarget, tc.ref, awssecretsfake.DefaultRegion)
				}
				if c.Target == awssecretsfake.TargetGetParameter && !c.WithDecryption {
					t.Fatalf("GetParameter without WithDecryption: a SecureString comes back encrypted")
				}
			})
		}
	}
}

func TestFetchErrors(t *testing.T) {
	fake, url := startFake(t)
	denied := fake.PutSecretString("autodiag/denied", redisURL)
	fake.Deny(denied)
	deniedParam := fake.PutParameter("/autodiag/denied", redisURL, true)
	fake.Deny(deniedParam)
	binary := fake.PutSecretBinary("autodiag/binary", []byte(redisURL))
	noURL := fake.PutSecretString("autodiag/no-url", `{"password": "`+redisURL+`"}`)
	notJSON := fake.PutSecretString("autodiag/broken-json", `{"url": "`+redisURL+`"`)
	urlNotString := fake.PutSecretString("autodiag/url-number", `{"url": 6379, "password": "s3cr3t-Pa55w0rd"}`)
	empty := fake.PutSecretString("autodiag/empty", "  ")
	missing := strings.Replace(denied, "autodiag/denied", "autodiag/missing", 1)
	c := testClients(url, awssecretsfake.DefaultRegion)

	tests := []struct {
		name, ref string
		clients   Clients
		want      []string // substrings of the error
		is        func(error) bool
	}{
		{name: "secret not found", ref: missing, want: []string{missing, "ResourceNotFoundException"},
			is: apiCode("ResourceNotFoundException")},
		{name: "parameter not found", ref: "/autodiag/missing", want: []string{"/autodiag/missing", "ParameterNotFound"},
			is: apiCode("ParameterNotFound")},
		{name: "secret access denied", ref: denied, want: []string{denied, "AccessDeniedException", "secretsmanager:GetSecretValue"},
			is: apiCode("AccessDeniedException")},
		{name: "parameter access denied", ref: deniedParam, want: []string{deniedParam, "AccessDeniedException", "ssm:GetParameter"},
			is: apiCode("AccessDeniedException")},
		{name: "binary secret", ref: binary, want: []string{binary, "binary"}},
		{name: "JSON without url", ref: noURL, want: []string{noURL, `without a "url" key`}},
		{name: "broken JSON", ref: notJSON, want: []string{notJSON, "not a JSON object"}},
		{name: "url not a string", ref: urlNotString, want: []string{urlNotString, "not a string"}},
		{name: "empty value", ref: empty, want: []string{empty, "empty"}},
		{name: "bad ref", ref: "redis://h:6379", want: []string{"redis://h:6379", "arn:aws:secretsmanager"},
			is: func(err error) bool { return errors.Is(err, ErrBadRef) }},
		{name: "no client", ref: "/autodiag/redis", clients: Clients{SecretsManager: c.SecretsManager}, want: []string{"no SSM client"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := c
			if tc.clients != (Clients{}) {
				cl = tc.clients
			}
			got, err := Fetch(t.Context(), tc.ref, cl)
			if err == nil || got != "" {
				t.Fatalf("Fetch = %q, %v; want an error", got, err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if tc.is != nil && !tc.is(err) {
				t.Errorf("error %q does not wrap the expected cause (%T chain)", err, errors.Unwrap(err))
			}
			for _, leak := range []string{redisURL, "s3cr3t", "Pa55w0rd"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("error %q contains the secret value", err)
				}
			}
		})
	}
}

func apiCode(code string) func(error) bool {
	return func(err error) bool {
		var ae smithy.APIError
		return errors.As(err, &ae) && ae.ErrorCode() == code
	}
}

// TestFetchEndpointFromEnvironment runs the clients the agent builds from
// the default config chain, pointed at the fake the way an operator or an
// end-to-end test points them: AWS_ENDPOINT_URL_SECRETS_MANAGER and
// AWS_ENDPOINT_URL_SSM.
func TestFetchEndpointFromEnvironment(t *testing.T) {
	fake, url := startFake(t)
	arn := fake.PutSecretString("autodiag/redis", `{"url":"`+redisURL+`"}`)
	fake.PutParameter("/autodiag/redis", redisURL, true)
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": url,
		"AWS_ENDPOINT_URL_SSM":             url,
		"AWS_REGION":                       awssecretsfake.DefaultRegion,
		"AWS_ACCESS_KEY_ID":                "AKIDEXAMPLE",
		"AWS_SECRET_ACCESS_KEY":            "wJalrXUtnFEMI",
		"AWS_CONFIG_FILE":                  filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE":      filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":        "true",
	} {
		t.Setenv(k, v)
	}
	cfg, err := awsconfig.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := NewClients(t.Context(), cfg)
	for _, ref := range []string{arn, "/autodiag/redis"} {
		if got, err := Fetch(t.Context(), ref, c); err != nil || got != redisURL {
			t.Fatalf("Fetch(%s) = %q, %v; want the URL", ref, got, err)
		}
	}
	if n := len(fake.Calls()); n != 2 {
		t.Fatalf("fake saw %d calls; want 2 (one per reference)", n)
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		ref          string
		kind, region string // kind "" = rejected
	}{
		{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/redis-AbCdEf", KindSecretsManager, "eu-west-1"},
		{"arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:r-AbCdEf", KindSecretsManager, "us-gov-west-1"},
		{"/autodiag/redis-url", KindSSM, ""},
		{"arn:aws:ssm:eu-west-1:123456789012:parameter/autodiag/redis-url", KindSSM, "eu-west-1"},
		{"autodiag/redis", "", ""},
		{"/", "", ""},
		{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:", "", ""},
		{"arn:aws:ssm:eu-west-1:123456789012:document/x", "", ""},
		{"arn:aws:s3:::bucket/key", "", ""},
		{"redis://h:6379", "", ""},
		{"", "", ""},
	}
	for _, tc := range tests {
		r, err := ParseRef(tc.ref)
		if tc.kind == "" {
			if !errors.Is(err, ErrBadRef) {
				t.Errorf("ParseRef(%q) = %+v, %v; want ErrBadRef", tc.ref, r, err)
			}
			continue
		}
		if err != nil || r.Kind != tc.kind || r.Region != tc.region || r.ID != tc.ref {
			t.Errorf("ParseRef(%q) = %+v, %v; want %s in %q", tc.ref, r, err, tc.kind, tc.region)
		}
	}
}
