package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
)

// fakeSender records the batches it is given, or fails.
type fakeSender struct {
	mu          sync.Mutex
	batches     [][]task.Task
	fail        error
	hadDeadline bool
}

var _ Sender = (*fakeSender)(nil)

func (s *fakeSender) SendBatch(ctx context.Context, ts []task.Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, s.hadDeadline = ctx.Deadline()
	if s.fail != nil {
		return s.fail
	}
	s.batches = append(s.batches, ts)
	return nil
}

func (s *fakeSender) sent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.batches {
		n += len(b)
	}
	return n
}

type testListener struct {
	srv      *httptest.Server
	sender   *fakeSender
	reg      *prometheus.Registry
	draining atomic.Bool
}

func newTestListener(t *testing.T, cr Credentials, maxBody int64) *testListener {
	t.Helper()
	ti := &testListener{sender: &fakeSender{}, reg: prometheus.NewRegistry()}
	h, err := NewHandler(HandlerConfig{
		Router:      testRouter(t),
		Sender:      ti.sender,
		Credentials: cr,
		MaxBody:     maxBody,
		Draining:    ti.draining.Load,
		Metrics:     NewMetrics(ti.reg),
		Clock:       clock.NewManual(goldenNow),
	})
	if err != nil {
		t.Fatal(err)
	}
	ti.srv = httptest.NewServer(h)
	t.Cleanup(ti.srv.Close)
	return ti
}

func (ti *testListener) post(t *testing.T, path, body string, auth func(*http.Request)) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ti.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != nil {
		auth(req)
	}
	resp, err := ti.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("answer %q: %v", b, err)
	}
	return resp.StatusCode, out
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func TestHandlerAlertmanager(t *testing.T) {
	ti := newTestListener(t, Credentials{BearerToken: "s3cret"}, 0)
	code, ans := ti.post(t, "/v1/alerts/alertmanager", mustRead(t, "alertmanager_v4.json"), bearer("s3cret"))
	if code != http.StatusOK {
		t.Fatalf("status %d: %v", code, ans)
	}
	got, _ := json.Marshal(ans)
	if want := `{"accepted":2,"ignored":[{"index":1,"reason":"resolved"}],"rejected":[]}`; string(got) != want {
		t.Fatalf("answer %s, want %s", got, want)
	}
	if n := ti.sender.sent(); n != 3 {
		t.Fatalf("sent %d tasks, want 3", n)
	}
	if !ti.sender.hadDeadline {
		t.Error("SendBatch ran without a deadline")
	}
	for res, want := range map[string]float64{ResultAccepted: 2, ResultIgnored: 1, ResultRejected: 0} {
		if v := testutil.ToFloat64(ti.metrics(t).alerts.WithLabelValues(SourceAlertmanager, res)); v != want {
			t.Errorf("autodiag_alerts_total{result=%q} = %v, want %v", res, v, want)
		}
	}
	if v := testutil.ToFloat64(ti.metrics(t).truncated.WithLabelValues(SourceAlertmanager)); v != 2 {
		t.Errorf("truncated = %v, want 2", v)
	}
	problems, err := promlint.NewWithMetricFamilies(gather(t, ti.reg)).Lint()
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", err, problems)
	}
}

// metrics is the Metrics the test listener's handler counts into.
func (ti *testListener) metrics(t *testing.T) *Metrics {
	t.Helper()
	h := ti.srv.Config.Handler.(*Handler)
	return h.c.Metrics
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func TestHandlerRefusals(t *testing.T) {
	ok := bearer("s3cret")
	for _, tc := range []struct {
		name     string
		path     string
		body     string
		auth     func(*http.Request)
		draining bool
		code     int
		reason   string
	}{
		{"no token", "/v1/alerts/alertmanager", mustRead(t, "alertmanager_v4.json"), nil, false, http.StatusUnauthorized, "unauthorized"},
		{"wrong token", "/v1/alerts/alertmanager", mustRead(t, "alertmanager_v4.json"), bearer("s3cre"), false, http.StatusUnauthorized, "unauthorized"},
		{"basic instead of bearer", "/v1/alerts/alertmanager", "{}", func(r *http.Request) { r.SetBasicAuth("u", "s3cret") }, false, http.StatusUnauthorized, "unauthorized"},
		{"draining", "/v1/alerts/zabbix", mustRead(t, "zabbix6_problem.json"), ok, true, http.StatusServiceUnavailable, "draining"},
		{"malformed", "/v1/alerts/zabbix", `{"event_id":`, ok, false, http.StatusBadRequest, ReasonMalformed},
		{"version", "/v1/alerts/alertmanager", `{"version":"5","alerts":[]}`, ok, false, http.StatusBadRequest, ReasonUnsupportedVersion},
		{"too large", "/v1/alerts/generic", `{"name":"` + strings.Repeat("a", 2048) + `"}`, ok, false, http.StatusRequestEntityTooLarge, ReasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ti := newTestListener(t, Credentials{BearerToken: "s3cret"}, 1024)
			ti.draining.Store(tc.draining)
			code, ans := ti.post(t, tc.path, tc.body, tc.auth)
			if code != tc.code || ans["error"] != tc.reason {
				t.Fatalf("status %d %v, want %d %s", code, ans, tc.code, tc.reason)
			}
			if n := ti.sender.sent(); n != 0 {
				t.Fatalf("%d tasks sent", n)
			}
		})
	}
}

func TestHandlerBasicAuth(t *testing.T) {
	ti := newTestListener(t, Credentials{BasicUser: "zabbix", BasicPassword: "pw"}, 0)
	for _, tc := range []struct {
		user, pass string
		code       int
	}{{"zabbix", "pw", http.StatusOK}, {"zabbix", "PW", http.StatusUnauthorized}, {"other", "pw", http.StatusUnauthorized}} {
		code, _ := ti.post(t, "/v1/alerts/zabbix", mustRead(t, "zabbix6_problem.json"), func(r *http.Request) { r.SetBasicAuth(tc.user, tc.pass) })
		if code != tc.code {
			t.Errorf("%s/%s: status %d, want %d", tc.user, tc.pass, code, tc.code)
		}
	}
}

// TestHandlerSenderFails: a queue that does not take the tasks is 503, so
// the alerting system retries the whole payload, and nothing is counted
// as accepted.
func TestHandlerSenderFails(t *testing.T) {
	ti := newTestListener(t, Credentials{}, 0)
	ti.sender.fail = errors.New("sqs: throttled")
	code, ans := ti.post(t, "/v1/alerts/alertmanager", mustRead(t, "alertmanager_v4.json"), nil)
	if code != http.StatusServiceUnavailable || ans["error"] != "queue_unavailable" {
		t.Fatalf("status %d %v", code, ans)
	}
	if v := testutil.ToFloat64(ti.metrics(t).alerts.WithLabelValues(SourceAlertmanager, ResultAccepted)); v != 0 {
		t.Fatalf("accepted counted %v", v)
	}
}

// TestHandlerMixedGeneric: one bad alert of a batch never drops the others.
func TestHandlerMixedGeneric(t *testing.T) {
	r, err := NewRouter(Routes{{Name: "any", Match: Match{Source: []string{"generic"}}, Tasks: []RouteTask{{Diagnostic: "uptime"}}}}, testValidator(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeSender{}
	h, err := NewHandler(HandlerConfig{Router: r, Sender: s})
	if err != nil {
		t.Fatal(err)
	}
	body := `[{"name":"a","host":"web-01"},{"name":"b","host":"web;02"},{"name":"c","nope":1},{"source":"other","name":"d","host":"web-04"},{"name":"e","host":"web-05"}]`
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/alerts/generic", bytes.NewBufferString(body)))
	want := `{"accepted":2,"ignored":[{"index":3,"reason":"no_route"}],"rejected":[{"index":1,"reason":"invalid_host"},{"index":2,"reason":"malformed_alert"}]}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Fatalf("%d %s\nwant %s", rec.Code, rec.Body, want)
	}
	if s.sent() != 2 {
		t.Fatalf("sent %d", s.sent())
	}
}

func TestReadyz(t *testing.T) {
	ti := newTestListener(t, Credentials{BearerToken: "x"}, 0)
	for _, draining := range []bool{false, true} {
		ti.draining.Store(draining)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ti.srv.URL+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ti.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusOK
		if draining {
			want = http.StatusServiceUnavailable
		}
		if resp.StatusCode != want {
			t.Fatalf("draining %v: %d", draining, resp.StatusCode)
		}
	}
}

// TestBearerSchemeCaseInsensitive: the auth-scheme is matched without
// regard to case (RFC 7235 2.1), on the alert listener and the admin API
// alike (both call Authorized); the token is compared exactly.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	c := Credentials{BearerToken: "s3cret"}
	tests := []struct {
		header string
		want   bool
	}{
		{"Bearer s3cret", true},
		{"bearer s3cret", true},
		{"BEARER s3cret", true},
		{"bEaReR  s3cret", true},
		{"Bearer S3CRET", false},
		{"Bearer", false},
		{"Bearer ", false},
		{"Bearers3cret", false},
		{"Basic s3cret", false},
		{"Token s3cret", false},
		{"Bearer wrong", false},
		{"", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", nil)
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		if got := c.Authorized(r); got != tt.want {
			t.Errorf("Authorization %q: authorized %v, want %v", tt.header, got, tt.want)
		}
	}
}
