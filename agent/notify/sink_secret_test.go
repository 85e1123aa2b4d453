package notify

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
)

// TestSinkSecretsReadAtEachSend: a webhook whose URL and HMAC key come
// from *_secret references reads them again at each send, so a rotated
// value applies without rebuilding the sink; a rotated URL that is not a
// valid one keeps the last good URL, and a key gone missing falls back to
// the key read at start; the error of a missing secret at start names the reference, never a value.
func TestSinkSecretsReadAtEachSend(t *testing.T) {
	var mu sync.Mutex
	var got []struct{ path, sig string }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, struct{ path, sig string }{r.URL.Path, r.Header.Get(HeaderSignature)})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	const urlRef, keyRef = "/autodiag/hook-url", "arn:aws:ssm:eu-west-1:123456789012:parameter/autodiag/hook-key"
	vals := map[string]string{urlRef: srv.URL + "/one", keyRef: "key-1"}
	var vmu sync.Mutex
	getenv := func(k string) (string, bool) { vmu.Lock(); defer vmu.Unlock(); v, ok := vals[k]; return v, ok }
	set := func(k, v string) { vmu.Lock(); vals[k] = v; vmu.Unlock() }
	cfg := []SinkConfig{{Name: "hook", Type: TypeWebhook, URLSecret: urlRef, SecretSecret: keyRef, AllowHTTP: true, On: []EventType{EventTypes[0]}}}
	sinks, err := NewSinks(cfg, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event":"x"}`)
	send := func() (string, string) {
		t.Helper()
		if err := sinks[0].Send(t.Context(), Delivery{Entry: Entry{ID: "d1", Event: EventTypes[0], Body: body}}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		last := got[len(got)-1]
		return last.path, last.sig
	}
	if p, sig := send(); p != "/one" || sig != Sign([]byte("key-1"), body) {
		t.Fatalf("first send to %s signed %s; want /one with key-1", p, sig)
	}
	set(urlRef, srv.URL+"/two")
	set(keyRef, "key-2")
	if p, sig := send(); p != "/two" || sig != Sign([]byte("key-2"), body) {
		t.Fatalf("send after rotation to %s signed %s; want /two with key-2", p, sig)
	}
	set(urlRef, "ftp://nowhere")
	set(keyRef, "")
	if p, sig := send(); p != "/two" || sig != Sign([]byte("key-1"), body) {
		t.Fatalf("send with an invalid URL and an empty key went to %s signed %s; want /two (the last good URL) with key-1", p, sig)
	}

	_, err = NewSinks(cfg, func(string) (string, bool) { return "", false }, nil)
	if err == nil || !strings.Contains(err.Error(), "secret "+urlRef) {
		t.Fatalf("NewSinks without the URL secret = %v; want an error naming %s", err, urlRef)
	}
}

// TestSinkURLRulesHoldForEverySource: a sink URL from url_env or
// url_secret meets the rules a literal url meets: at start, a URL to the
// metadata service, a link-local address or the agent's own admin address
// stops the start naming its source, never quoting it; at a secrets
// refresh, such a rotated URL is never sent to, the last good URL stays in
// force, and the refusal is logged and counted once.
func TestSinkURLRulesHoldForEverySource(t *testing.T) {
	const self = "127.0.0.1:9464"
	start := []struct {
		name, url, want string
	}{
		{"own admin drain", "http://127.0.0.1:9464/v1/drain", "admin"},
		{"own admin by name", "http://localhost:9464/v1/drain", "admin"},
		{"metadata address", "http://169.254.169.254/latest/meta-data/", "metadata"},
		{"metadata IPv6", "http://[fd00:ec2::254]/latest/", "metadata"},
		{"metadata name", "http://instance-data/latest/", "metadata"},
		{"GCE metadata name", "http://metadata.google.internal/computeMetadata/v1/", "metadata"},
		{"link-local", "http://169.254.10.1/hook", "link-local"},
	}
	for _, tt := range start {
		for _, src := range []string{"url_env", "url_secret"} {
			t.Run(tt.name+"/"+src, func(t *testing.T) {
				c := SinkConfig{Name: "hook", Type: TypeWebhook, AllowHTTP: true, On: []EventType{EventTypes[0]}}
				ref := "HOOK_URL"
				if src == "url_secret" {
					ref = "/autodiag/hook-url"
					c.URLSecret = ref
				} else {
					c.URLEnv = ref
				}
				getenv := func(k string) (string, bool) { return tt.url, k == ref }
				_, err := NewSinksWith([]SinkConfig{c}, SinkDeps{Getenv: getenv, Self: self})
				if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), ref) {
					t.Fatalf("NewSinksWith = %v; want an error naming %s and saying %q", err, ref, tt.want)
				}
				if strings.Contains(err.Error(), tt.url) {
					t.Fatalf("the error quotes the URL: %v", err)
				}
			})
		}
	}

	t.Run("refresh", func(t *testing.T) {
		good := newReceiver(t)
		admin := newReceiver(t) // stands for the agent's own admin listener
		adminAddr := strings.TrimPrefix(admin.URL, "http://")
		const ref = "/autodiag/hook-url"
		var vmu sync.Mutex
		val := good.URL + "/hook"
		getenv := func(k string) (string, bool) { vmu.Lock(); defer vmu.Unlock(); return val, k == ref }
		set := func(v string) { vmu.Lock(); val = v; vmu.Unlock() }
		c := SinkConfig{Name: "hook", Type: TypeWebhook, URLSecret: ref, AllowHTTP: true, On: []EventType{EventTypes[0]}}
		sinks, err := NewSinksWith([]SinkConfig{c}, SinkDeps{Getenv: getenv, Self: adminAddr})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		var logs strings.Builder
		var lmu sync.Mutex
		log := slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) { lmu.Lock(); defer lmu.Unlock(); return logs.Write(p) }), nil))
		d, err := NewDispatcher(NewMemoryOutbox(MemoryOptions{}), sinks, Options{InstanceID: "i-1", Registerer: reg, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		refused := d.m.urlRefused.WithLabelValues("hook")
		if v := testutilCounter(refused); v != 0 {
			t.Fatalf("refusals at start = %v; want 0", v)
		}
		send := func() {
			t.Helper()
			if err := sinks[0].Send(t.Context(), Delivery{Entry: Entry{ID: "d1", Event: EventTypes[0], Body: []byte(`{}`)}}); err != nil {
				t.Fatal(err)
			}
		}
		send()
		bad := admin.URL + "/v1/drain"
		set(bad)
		send()
		send()
		if n := len(admin.requests()); n != 0 {
			t.Fatalf("the agent's own admin address got %d requests; want 0", n)
		}
		if n := len(good.requests()); n != 3 {
			t.Fatalf("the last good URL got %d requests; want 3", n)
		}
		if v := testutilCounter(refused); v != 1 {
			t.Fatalf("refusals = %v; want 1 (one rotated value, however many sends)", v)
		}
		lmu.Lock()
		out := logs.String()
		lmu.Unlock()
		if strings.Count(out, "outbound URL rules") != 1 || !strings.Contains(out, `"sink":"hook"`) || strings.Contains(out, bad) {
			t.Fatalf("log = %s; want one WARN naming the sink, never the URL", out)
		}
		// A good rotation applies again.
		set(good.URL + "/rotated")
		send()
		if r := good.requests(); len(r) != 4 {
			t.Fatalf("the rotated good URL got %d requests in all; want 4", len(r))
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestSinkClientRefusesForbiddenAddressesAfterDNS: the sinks' client
// checks the address it dials, so a name that resolves to the metadata
// service, a link-local address or the agent's admin listener (which the
// URL as written does not show) is refused; other loopback ports are not.
func TestSinkClientRefusesForbiddenAddressesAfterDNS(t *testing.T) {
	admin := newReceiver(t)
	other := newReceiver(t)
	c := newHTTPClient(strings.TrimPrefix(admin.URL, "http://"))
	for _, u := range []string{admin.URL + "/v1/drain", "http://169.254.169.254/latest/", "http://[fe80::1]/"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, u, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, urlcheck.ErrDialRefused) {
			t.Errorf("POST %s: %v; want the dial refused", u, err)
		}
	}
	if n := len(admin.requests()); n != 0 {
		t.Errorf("the admin listener got %d requests", n)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, other.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST to another loopback port: %v", err)
	}
	resp.Body.Close()
}
