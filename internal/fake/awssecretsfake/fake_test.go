package awssecretsfake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// post sends one raw JSON 1.1 request, signed (in scope only) for region
// and service unless auth is given.
func post(t *testing.T, url, target, body, auth string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", b, err)
	}
	return resp.StatusCode, resp.Header, m
}

func scope(region, service string) string {
	return "AWS4-HMAC-SHA256 Credential=AKID/20260101/" + region + "/" + service + "/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"
}

// TestErrorShapes pins the wire shapes the SDK's deserializers depend on.
func TestErrorShapes(t *testing.T) {
	fake := New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	arn := fake.PutSecretString("s", "v")
	fake.Deny(arn)
	sm, ssm := scope(DefaultRegion, "secretsmanager"), scope(DefaultRegion, "ssm")

	tests := []struct {
		name, target, body, auth string
		want                     map[string]any
	}{
		{"secret not found", TargetGetSecretValue, `{"SecretId":"nope"}`, sm,
			map[string]any{"__type": "ResourceNotFoundException", "Message": "Secrets Manager can't find the specified secret."}},
		{"parameter not found has no message", TargetGetParameter, `{"Name":"/nope","WithDecryption":true}`, ssm,
			map[string]any{"__type": "ParameterNotFound"}},
		{"access denied", TargetGetSecretValue, `{"SecretId":"` + arn + `"}`, sm, nil},
		{"unknown operation", "secretsmanager.PutSecretValue", `{}`, sm, map[string]any{"__type": "UnknownOperationException"}},
		{"no signature", TargetGetSecretValue, `{"SecretId":"s"}`, "",
			map[string]any{"__type": "MissingAuthenticationTokenException", "message": "Missing Authentication Token"}},
		{"signed for another region", TargetGetParameter, `{"Name":"/x"}`, scope("eu-west-1", "ssm"), nil},
		{"signed for another service", TargetGetParameter, `{"Name":"/x"}`, sm, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, h, m := post(t, srv.URL, tc.target, tc.body, tc.auth)
			if code != http.StatusBadRequest || h.Get("Content-Type") != "application/x-amz-json-1.1" || h.Get("X-Amzn-Requestid") == "" {
				t.Fatalf("status %d, headers %v; want 400 with the JSON 1.1 content type and a request id", code, h)
			}
			if tc.want != nil {
				if len(m) != len(tc.want) {
					t.Fatalf("body %v; want exactly %v", m, tc.want)
				}
				for k, v := range tc.want {
					if m[k] != v {
						t.Fatalf("body %v; want %v", m, tc.want)
					}
				}
			}
		})
	}
	calls := fake.Calls()
	if calls[2].ErrorType != "AccessDeniedException" || calls[5].ErrorType != "InvalidSignatureException" || calls[6].ErrorType != "InvalidSignatureException" {
		t.Fatalf("calls = %+v", calls)
	}
}

// TestSecureStringEncryptedWithoutDecryption checks that only
// WithDecryption=true yields the plaintext of a SecureString.
func TestSecureStringEncryptedWithoutDecryption(t *testing.T) {
	fake := New()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	fake.PutParameter("/p", "plain", true)
	fake.PutParameter("/s", "visible", false)
	for _, tc := range []struct {
		body, want string
		plain      bool
	}{
		{`{"Name":"/p","WithDecryption":true}`, "plain", true},
		{`{"Name":"/p"}`, "plain", false},
		{`{"Name":"/s"}`, "visible", true},
	} {
		code, _, m := post(t, srv.URL, TargetGetParameter, tc.body, scope(DefaultRegion, "ssm"))
		p, _ := m["Parameter"].(map[string]any)
		if code != http.StatusOK || p == nil {
			t.Fatalf("%s: status %d body %v", tc.body, code, m)
		}
		if got := p["Value"] == tc.want; got != tc.plain {
			t.Fatalf("%s: Value %v; plaintext %v, want %v", tc.body, p["Value"], got, tc.plain)
		}
	}
}
