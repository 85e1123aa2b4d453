package tracing

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/internal/configerr"
)

// Config is the `tracing:` section. Tracing is on when an endpoint is set,
// here or by OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, and OTEL_SDK_DISABLED is
// not true. Where both set a value, the environment wins (it is the
// deployment's, the file the fleet's).
type Config struct {
	// Endpoint is the collector's OTLP/HTTP base URL, e.g.
	// https://otel-collector:4318; spans are posted to {endpoint}/v1/traces.
	// https is required unless the host is loopback or AllowHTTP is set.
	Endpoint string `yaml:"endpoint"`
	// AllowHTTP accepts a plain http:// endpoint to any host (a collector
	// on a private network); without it http is accepted to loopback only.
	AllowHTTP bool `yaml:"allow_http"`
	// SamplerRatio is the share of new traces sampled, 0 to 1 (default 1);
	// a trace continued from a producer keeps the producer's decision.
	SamplerRatio float64 `yaml:"sampler_ratio"`
	// HeadersSecret names a secret (Secrets Manager ARN or SSM parameter)
	// holding the exporter's headers as key=value pairs separated by
	// commas, OTEL_EXPORTER_OTLP_HEADERS' format (e.g. an API key of a
	// hosted backend); empty = none.
	HeadersSecret string `yaml:"headers_secret"`
	// Timeout bounds one export, its retries included (default 10s).
	Timeout time.Duration `yaml:"timeout"`
	// Compression is none (default, the OTLP default: cheapest on the
	// agent's CPUs, for a collector on the instance or in its VPC) or gzip
	// (a remote backend, where bytes cost more than CPU).
	Compression string `yaml:"compression"`
	// LinkTemplate makes a trace link for people (Slack, autodiag show):
	// {trace_id} is replaced by the trace id, e.g.
	// https://grafana.example.com/explore?...{trace_id}; empty = no link.
	LinkTemplate string `yaml:"link_template"`
}

// Defaults of the section.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultSamplerRatio = 1.0
	CompressionGzip     = "gzip"
	CompressionNone     = "none"
	maxTimeout          = time.Minute
)

// DefaultConfig is the section's defaults: off, ratio 1, no compression,
// 10 s.
func DefaultConfig() Config {
	return Config{SamplerRatio: DefaultSamplerRatio, Timeout: DefaultTimeout, Compression: CompressionNone}
}

// Validate reports every problem of the section at once, each a
// *configerr.Error whose key is relative to the section.
func (c Config) Validate() error {
	var errs []error
	add := func(key, format string, a ...any) { errs = append(errs, configerr.Errorf(key, format, a...)) }
	if c.Endpoint != "" {
		if err := checkEndpoint(c.Endpoint, c.AllowHTTP); err != nil {
			errs = append(errs, &configerr.Error{Key: "endpoint", Err: err})
		}
	}
	if !(c.SamplerRatio >= 0 && c.SamplerRatio <= 1) { // NaN fails too
		add("sampler_ratio", "must be between 0 and 1, got %g", c.SamplerRatio)
	}
	if c.Timeout < 0 || c.Timeout > maxTimeout {
		add("timeout", "must be between 0 and %s, got %s", maxTimeout, c.Timeout)
	}
	switch c.Compression {
	case "", CompressionGzip, CompressionNone:
	default:
		add("compression", "must be %q or %q, got %q", CompressionGzip, CompressionNone, c.Compression)
	}
	if c.LinkTemplate != "" {
		if !strings.Contains(c.LinkTemplate, "{trace_id}") {
			add("link_template", "must contain {trace_id}")
		} else if u, err := url.Parse(strings.ReplaceAll(c.LinkTemplate, "{trace_id}", "0")); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
			add("link_template", "must be an http(s) URL")
		}
	}
	return errors.Join(errs...)
}

// checkEndpoint applies report.base_url's rules: https unless loopback (or
// allow_http), no user:password@, never the metadata service or a
// link-local address.
func checkEndpoint(raw string, allowHTTP bool) error {
	if err := urlcheck.Check(raw, urlcheck.Rules{AllowHTTP: allowHTTP, AllowHTTPLoopback: true}); err != nil {
		return err
	}
	u, _ := url.Parse(raw)
	if u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must not hold a query or fragment")
	}
	return nil
}

// Settings are the effective tracing settings: the section with the
// OTEL_* environment applied.
type Settings struct {
	Config
	// On is false when no endpoint is set or OTEL_SDK_DISABLED is true.
	On bool
	// TracesURL is where spans are posted.
	TracesURL string
	// TracesURLFrom names where TracesURL came from (tracing.endpoint or
	// the OTEL_* variable), for an error about it.
	TracesURLFrom string
	// Headers are sent with every export; from OTEL_EXPORTER_OTLP_HEADERS
	// and HeadersSecret (never logged).
	Headers map[string]string
	// ServiceName is OTEL_SERVICE_NAME, default "autodiag".
	ServiceName string
	// ResourceAttrs are OTEL_RESOURCE_ATTRIBUTES' key=value pairs.
	ResourceAttrs map[string]string
}

// The standard environment variables Resolve reads.
const (
	EnvSDKDisabled     = "OTEL_SDK_DISABLED"
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvHeaders         = "OTEL_EXPORTER_OTLP_HEADERS"
	EnvTracesHeaders   = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	EnvSampler         = "OTEL_TRACES_SAMPLER"
	EnvSamplerArg      = "OTEL_TRACES_SAMPLER_ARG"
	EnvServiceName     = "OTEL_SERVICE_NAME"
	EnvResourceAttrs   = "OTEL_RESOURCE_ATTRIBUTES"
	EnvCompression     = "OTEL_EXPORTER_OTLP_COMPRESSION"
	EnvTracesTimeout   = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	defaultServiceName = "autodiag"
)

// Resolve applies the OTEL_* environment (read through getenv) to c, which
// the configuration loader has validated, and reads the
// headers secret (through lookup; nil = none). Errors name the
// key (tracing.KEY) or the variable; none holds a header value.
func Resolve(c Config, getenv func(string) (string, bool), lookup func(string) (string, bool)) (Settings, error) {
	env := func(k string) string {
		v, _ := getenv(k)
		return strings.TrimSpace(v)
	}
	s := Settings{Config: c, ServiceName: defaultServiceName, Headers: map[string]string{}}
	var errs []error
	bad := func(key, format string, a ...any) { errs = append(errs, configerr.Errorf(key, format, a...)) }
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Compression == "" {
		s.Compression = CompressionNone
	}
	base, traces := s.Endpoint, ""
	if v := env(EnvEndpoint); v != "" {
		base = v
	}
	if v := env(EnvTracesEndpoint); v != "" {
		traces = v // the full URL, used as it is
	}
	switch {
	case traces != "":
		if err := checkEndpoint(traces, s.AllowHTTP); err != nil {
			errs = append(errs, &configerr.Error{Key: EnvTracesEndpoint, Err: err})
		}
		s.TracesURL, s.TracesURLFrom = traces, EnvTracesEndpoint
	case base != "":
		s.TracesURLFrom = "tracing.endpoint"
		if base != s.Endpoint {
			if err := checkEndpoint(base, s.AllowHTTP); err != nil {
				errs = append(errs, &configerr.Error{Key: EnvEndpoint, Err: err})
			}
			s.TracesURLFrom = EnvEndpoint
		}
		s.TracesURL = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	s.On = s.TracesURL != ""
	if v := env(EnvSDKDisabled); v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			bad(EnvSDKDisabled, "must be true or false, got %q", v)
		}
		if off {
			s.On = false
		}
	}
	switch v := env(EnvSampler); v {
	case "":
	case "always_on", "parentbased_always_on":
		s.SamplerRatio = 1
	case "always_off", "parentbased_always_off":
		s.SamplerRatio = 0
	case "traceidratio", "parentbased_traceidratio":
		s.SamplerRatio = 1
		if a := env(EnvSamplerArg); a != "" {
			r, err := strconv.ParseFloat(a, 64)
			if err != nil || !(r >= 0 && r <= 1) { // NaN fails too
				bad(EnvSamplerArg, "must be a ratio between 0 and 1, got %q", a)
			} else {
				s.SamplerRatio = r
			}
		}
	default:
		// Every sampler is parent-based: a producer's decision is kept.
		bad(EnvSampler, "must be always_on, always_off, traceidratio or their parentbased_ forms, got %q", v)
	}
	if v := env(EnvCompression); v != "" {
		if v != CompressionGzip && v != CompressionNone {
			bad(EnvCompression, "must be gzip or none, got %q", v)
		}
		s.Compression = v
	}
	if v := env(EnvTracesTimeout); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 || int64(ms) > maxTimeout.Milliseconds() { // compared before it could overflow
			bad(EnvTracesTimeout, "must be milliseconds between 1 and %d, got %q", maxTimeout.Milliseconds(), v)
		} else {
			s.Timeout = time.Duration(ms) * time.Millisecond
		}
	}
	if v := env(EnvServiceName); v != "" {
		s.ServiceName = v
	}
	if v := env(EnvResourceAttrs); v != "" {
		m, err := parsePairs(v)
		if err != nil {
			errs = append(errs, &configerr.Error{Key: EnvResourceAttrs, Err: err})
		}
		s.ResourceAttrs = m
	}
	if c.HeadersSecret != "" && s.On {
		v, ok := "", false
		if lookup != nil {
			v, ok = lookup(c.HeadersSecret)
		}
		if !ok {
			bad("tracing.headers_secret", "the secret could not be read")
		} else if m, err := parsePairs(v); err != nil {
			errs = append(errs, &configerr.Error{Key: "tracing.headers_secret", Err: err})
		} else {
			for k, v := range m {
				s.Headers[k] = v
			}
		}
	}
	for _, k := range []string{EnvHeaders, EnvTracesHeaders} {
		if v := env(k); v != "" {
			m, err := parsePairs(v)
			if err != nil {
				errs = append(errs, &configerr.Error{Key: k, Err: err})
			}
			for hk, hv := range m {
				s.Headers[hk] = hv
			}
		}
	}
	return s, errors.Join(errs...)
}

// CheckSelf refuses a collector URL that reaches the agent's own admin
// listener (self, host:port): the exporter would post to the agent's API.
// The error names the key or variable the URL came from, never the URL.
func (s Settings) CheckSelf(self string) error {
	if !s.On || self == "" {
		return nil
	}
	if err := urlcheck.Check(s.TracesURL, urlcheck.Rules{AllowHTTP: true, AllowUserinfo: true, Self: self}); err != nil {
		return &configerr.Error{Key: s.TracesURLFrom, Err: err}
	}
	return nil
}

// parsePairs reads the W3C Baggage-like list OTEL_* variables use:
// key=value pairs separated by commas, values percent-decoded. Its errors
// never quote a value: a header may hold a key.
func parsePairs(s string) (map[string]string, error) {
	m := map[string]string{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return m, fmt.Errorf("pair %d is not key=value", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return m, fmt.Errorf("pair %d (%s): the value is not percent-encoded correctly", i+1, k)
		}
		m[k] = dv
	}
	return m, nil
}

// Link is the link template with id in place of {trace_id}; "" without a
// template or an id.
func (c Config) Link(traceID string) string {
	if c.LinkTemplate == "" || traceID == "" {
		return ""
	}
	return strings.ReplaceAll(c.LinkTemplate, "{trace_id}", traceID)
}
