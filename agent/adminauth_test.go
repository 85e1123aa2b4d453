package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/alert"
)

// TestRequireAdminAuth: with admin_auth every admin endpoint answers 401
// with a challenge unless the request carries the credentials, except the
// probes GET /healthz and GET /readyz.
func TestRequireAdminAuth(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	const task = `{"host":"web-01.example.com","diagnostic":"echo"}`
	for _, auth := range []struct {
		name      string
		creds     alert.Credentials
		challenge string
		right     func(*http.Request)
		wrong     func(*http.Request)
	}{
		{"bearer", alert.Credentials{BearerToken: "s3cret"}, `Bearer realm="autodiag admin"`,
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cre") }},
		{"basic", alert.Credentials{BasicUser: "ops", BasicPassword: "pw"}, `Basic realm="autodiag admin"`,
			func(r *http.Request) { r.SetBasicAuth("ops", "pw") },
			func(r *http.Request) { r.SetBasicAuth("ops", "pwx") }},
	} {
		t.Run(auth.name, func(t *testing.T) {
			h := admin.RequireAuth(auth.creds, ta.Handler())
			serve := func(method, path, body string, with func(*http.Request)) *httptest.ResponseRecorder {
				r := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
				if with != nil {
					with(r)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			for _, ep := range []struct{ method, path, body string }{
				{http.MethodGet, "/metrics", ""},
				{http.MethodGet, "/v1/status", ""},
				{http.MethodGet, "/v1/tasks/none", ""},
				{http.MethodPost, "/v1/tasks", task},
				{http.MethodPost, "/v1/drain", ""},
				{http.MethodGet, "/nowhere", ""},
			} {
				for _, with := range []func(*http.Request){nil, auth.wrong} {
					w := serve(ep.method, ep.path, ep.body, with)
					if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != auth.challenge {
						t.Errorf("%s %s (wrong or no credentials) = %d, WWW-Authenticate %q; want 401, %q",
							ep.method, ep.path, w.Code, w.Header().Get("WWW-Authenticate"), auth.challenge)
					}
				}
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				if w := serve(http.MethodGet, path, "", nil); w.Code != http.StatusOK {
					t.Errorf("GET %s without credentials = %d; want 200 (probes stay open)", path, w.Code)
				}
			}
			if w := serve(http.MethodGet, "/v1/status", "", auth.right); w.Code != http.StatusOK {
				t.Errorf("GET /v1/status with the credentials = %d; want 200", w.Code)
			}
			if w := serve(http.MethodGet, "/metrics", "", auth.right); w.Code != http.StatusOK {
				t.Errorf("GET /metrics with the credentials = %d; want 200", w.Code)
			}
			if auth.creds.BearerToken != "" {
				// RFC 7235: the scheme is case-insensitive.
				lower := func(r *http.Request) { r.Header.Set("Authorization", "bearer s3cret") }
				if w := serve(http.MethodGet, "/v1/status", "", lower); w.Code != http.StatusOK {
					t.Errorf("GET /v1/status with 'bearer' in lower case = %d; want 200", w.Code)
				}
			}
			if w := serve(http.MethodPost, "/v1/tasks", task, auth.right); w.Code != http.StatusAccepted {
				t.Errorf("POST /v1/tasks with the credentials = %d; want 202: %s", w.Code, w.Body)
			}
		})
	}
	// The drain is last: it ends the agent's intake for the cases above.
	h := admin.RequireAuth(alert.Credentials{BearerToken: "s3cret"}, ta.Handler())
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/drain", nil)
	r.Header.Set("Authorization", "Bearer s3cret")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/drain with the token = %d; want 202", w.Code)
	}
}

// TestRequireAdminAuthWithoutCredentials: no admin_auth leaves the
// handler as it is.
func TestRequireAdminAuthWithoutCredentials(t *testing.T) {
	t.Parallel()
	h := http.NewServeMux()
	if got := admin.RequireAuth(alert.Credentials{}, h); got != http.Handler(h) {
		t.Fatalf("admin.RequireAuth with no credentials wrapped the handler")
	}
}
