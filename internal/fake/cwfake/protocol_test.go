package cwfake_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/encoding/cbor"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/fake/cwfake"
)

// TestProtocolErrorsThroughSDK checks the answers to requests the fake does
// not serve, as the SDK sees them.
func TestProtocolErrorsThroughSDK(t *testing.T) {
	tests := []struct {
		name string
		opts []func(*cloudwatch.Options)
		call func(*cloudwatch.Client) error
		code string
	}{
		{"other operation", nil, func(c *cloudwatch.Client) error {
			_, err := c.ListMetrics(t.Context(), &cloudwatch.ListMetricsInput{})
			return err
		}, "UnknownOperationException"},
		{"signed for another region", []func(*cloudwatch.Options){func(o *cloudwatch.Options) { o.Region = "eu-west-1" }},
			nil, "SignatureDoesNotMatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			call := tt.call
			if call == nil {
				call = func(c *cloudwatch.Client) error {
					return put(t.Context(), c, "autodiag", []cwtypes.MetricDatum{agentDatum("X", 1)}, tt.opts...)
				}
			}
			err := call(e.client)
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tt.code {
				t.Fatalf("error = %v, want %s", err, tt.code)
			}
			if len(e.srv.Data()) != 0 {
				t.Errorf("recorded data")
			}
		})
	}
}

// TestRawRequests checks the protocol rules a non-SDK client could break.
func TestRawRequests(t *testing.T) {
	const auth = "AWS4-HMAC-SHA256 Credential=AKID/20260301/us-east-1/monitoring/aws4_request, SignedHeaders=host, Signature=00"
	valid := cbor.Encode(cbor.Map{
		"Namespace": cbor.String("autodiag"),
		"MetricData": cbor.List{cbor.Map{
			"MetricName": cbor.String("DrainSeconds"),
			"Value":      cbor.Uint(7), // any CBOR number is accepted for a double
			"Timestamp":  &cbor.Tag{ID: 1, Value: cbor.Uint(uint64(epoch.Unix()))},
			"Unknown":    cbor.String("ignored"),
		}},
	})
	tests := []struct {
		name    string
		path    string
		headers map[string]string
		body    []byte
		status  int
		typ     string
	}{
		{"valid", "/service/GraniteServiceVersion20100801/operation/PutMetricData", nil, valid, 200, ""},
		{"unsigned", "/service/GraniteServiceVersion20100801/operation/PutMetricData",
			map[string]string{"Authorization": ""}, valid, 403, "com.amazon.coral.service#MissingAuthenticationTokenException"},
		{"signed for another service", "/service/GraniteServiceVersion20100801/operation/PutMetricData",
			map[string]string{"Authorization": strings.Replace(auth, "/monitoring/", "/sqs/", 1)}, valid, 403,
			"com.amazon.coral.service#InvalidSignatureException"},
		{"wrong path", "/", nil, valid, 404, "com.amazon.coral.service#UnknownOperationException"},
		{"no protocol header", "/service/GraniteServiceVersion20100801/operation/PutMetricData",
			map[string]string{"Smithy-Protocol": ""}, valid, 400, "com.amazon.coral.service#SerializationException"},
		{"JSON body", "/service/GraniteServiceVersion20100801/operation/PutMetricData",
			map[string]string{"Content-Type": "application/json"}, []byte(`{"Namespace":"x"}`), 400, "com.amazon.coral.service#SerializationException"},
		{"not CBOR", "/service/GraniteServiceVersion20100801/operation/PutMetricData", nil, []byte{0xff, 0x00}, 400,
			"com.amazon.coral.service#SerializationException"},
		{"wrong member type", "/service/GraniteServiceVersion20100801/operation/PutMetricData", nil,
			cbor.Encode(cbor.Map{"Namespace": cbor.Uint(1)}), 400, "com.amazon.coral.service#SerializationException"},
		{"empty body", "/service/GraniteServiceVersion20100801/operation/PutMetricData", nil, nil, 400,
			"com.amazonaws.cloudwatch#MissingRequiredParameterException"},
		{"too large", "/service/GraniteServiceVersion20100801/operation/PutMetricData", nil, make([]byte, 1<<20+1), 413,
			"com.amazon.coral.service#RequestEntityTooLargeException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, ts := cwfake.NewTestServer(t, cwfake.WithClock(clock.Func(func() time.Time { return epoch })))
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+tt.path, bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", auth)
			req.Header.Set("Smithy-Protocol", "rpc-v2-cbor")
			req.Header.Set("Content-Type", "application/cbor")
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (body %x)", resp.StatusCode, tt.status, body)
			}
			if resp.Header.Get("Smithy-Protocol") != "rpc-v2-cbor" {
				t.Errorf("response Smithy-Protocol = %q", resp.Header.Get("Smithy-Protocol"))
			}
			if tt.typ == "" {
				if len(body) != 0 {
					t.Errorf("success body = %x, want empty (no output shape)", body)
				}
				d := srv.Data()
				if len(d) != 1 || d[0].Value != 7 || !d[0].Timestamp.Equal(epoch) {
					t.Errorf("Data() = %+v", d)
				}
				return
			}
			v, err := cbor.Decode(body)
			if err != nil {
				t.Fatalf("error body is not CBOR: %v", err)
			}
			m, _ := v.(cbor.Map)
			if m["__type"] != cbor.String(tt.typ) {
				t.Errorf("__type = %v, want %s", m["__type"], tt.typ)
			}
			if s, _ := m["message"].(cbor.String); s == "" {
				t.Errorf("no message in %v", m)
			}
			code, fault, _ := strings.Cut(resp.Header.Get("X-Amzn-Query-Error"), ";")
			if code == "" || fault != "Sender" {
				t.Errorf("X-Amzn-Query-Error = %q", resp.Header.Get("X-Amzn-Query-Error"))
			}
			if len(srv.Data()) != 0 {
				t.Errorf("recorded data")
			}
		})
	}
}
