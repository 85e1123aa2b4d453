package alert

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/internal/clock"
)

// amStandIn speaks Alertmanager API v2's GET /api/v2/alerts: it answers
// the alerts of hosts, as the real server lists them, and records the
// queries it got.
type amStandIn struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
}

func diskAlert(host string) map[string]any {
	return map[string]any{
		"labels":      map[string]string{"alertname": "DiskSpaceLow", "instance": host + ":9100", "severity": "critical", "mountpoint": "/var"},
		"annotations": map[string]string{"summary": "disk full"}, "startsAt": "2026-11-30T13:58:12.345Z",
		"endsAt": "2026-11-30T14:58:12.345Z", "fingerprint": "fp-" + host, "generatorURL": "", "updatedAt": "2026-11-30T13:58:12.345Z",
		"receivers": []map[string]string{{"name": "autodiag"}},
		"status":    map[string]any{"state": "active", "silencedBy": []string{}, "inhibitedBy": []string{}},
	}
}

func newAMStandIn(t *testing.T, hosts ...string) *amStandIn {
	s := &amStandIn{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v2/alerts" {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.RawQuery)
		s.mu.Unlock()
		var out []map[string]any
		for _, h := range hosts {
			out = append(out, diskAlert(h))
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *amStandIn) asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

// truncatedPayload is an Alertmanager notification with the alerts of
// hosts and truncatedAlerts left out, from externalURL.
func truncatedPayload(externalURL string, truncated int, hosts ...string) string {
	var alerts []string
	for _, h := range hosts {
		a := diskAlert(h)
		a["status"] = "firing"
		delete(a, "receivers")
		delete(a, "updatedAt")
		b, _ := json.Marshal(a)
		alerts = append(alerts, string(b))
	}
	return fmt.Sprintf(`{"version":"4","groupKey":"{}:{alertname=\"DiskSpaceLow\"}","truncatedAlerts":%d,"status":"firing",`+
		`"receiver":"autodiag","groupLabels":{"alertname":"DiskSpaceLow"},"commonLabels":{},"commonAnnotations":{},`+
		`"externalURL":%q,"alerts":[%s]}`, truncated, externalURL, strings.Join(alerts, ","))
}

func newFetchingListener(t *testing.T, c AlertmanagerConfig) (*testListener, *Metrics) {
	t.Helper()
	ti := &testListener{sender: &fakeSender{}, reg: prometheus.NewRegistry()}
	m := NewMetrics(ti.reg)
	h, err := NewHandler(HandlerConfig{Router: testRouter(t), Sender: ti.sender, Metrics: m,
		Clock: clock.NewManual(goldenNow), Fetcher: NewTruncatedFetcher(c, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ti.srv = httptest.NewServer(h)
	t.Cleanup(ti.srv.Close)
	return ti, m
}

func (ti *testListener) sentHosts() map[string]bool {
	ti.sender.mu.Lock()
	defer ti.sender.mu.Unlock()
	out := map[string]bool{}
	for _, b := range ti.sender.batches {
		for _, tk := range b {
			out[tk.Host] = true
		}
	}
	return out
}

// Alertmanager sends 3 of 4 firing alerts (max_alerts: 3): the alert listener
// fetches the group's alerts from the allowed sender's API v2 and
// diagnoses the 4th host too, once each; a sender not allowed is never
// asked.
func TestTruncatedAlertsFetched(t *testing.T) {
	hosts := []string{"web-01", "web-02", "web-03", "web-04"}
	am := newAMStandIn(t, hosts...)
	t.Run("allowed", func(t *testing.T) {
		ti, m := newFetchingListener(t, AlertmanagerConfig{FetchTruncated: true, AllowedURLs: []string{am.URL + "/"}})
		code, ans := ti.post(t, "/v1/alerts/alertmanager", truncatedPayload(am.URL, 1, hosts[:3]...), nil)
		if code != http.StatusOK || ans["accepted"] != float64(4) {
			t.Fatalf("answer %d %v, want 4 accepted (3 sent, 1 fetched)", code, ans)
		}
		got := ti.sentHosts()
		for _, h := range hosts {
			if !got[h] {
				t.Errorf("no task for %s (tasks for %v)", h, got)
			}
		}
		q := am.asked()
		if len(q) != 1 || !strings.Contains(q[0], "filter=alertname%3D%22DiskSpaceLow%22") || !strings.Contains(q[0], "active=true") {
			t.Errorf("API v2 queries %q, want one filtered by the group's labels", q)
		}
		if v := testutil.ToFloat64(m.fetches.WithLabelValues(FetchOK)); v != 1 {
			t.Errorf("fetches{result=ok} = %v, want 1", v)
		}
	})
	t.Run("not allowed", func(t *testing.T) {
		before := len(am.asked())
		ti, m := newFetchingListener(t, AlertmanagerConfig{FetchTruncated: true, AllowedURLs: []string{"http://am.example.com:9093"}})
		code, ans := ti.post(t, "/v1/alerts/alertmanager", truncatedPayload(am.URL, 1, hosts[:3]...), nil)
		if code != http.StatusOK || ans["accepted"] != float64(3) {
			t.Fatalf("answer %d %v, want the 3 sent accepted", code, ans)
		}
		if len(am.asked()) != before {
			t.Error("a sender outside allowed_urls was asked")
		}
		if v := testutil.ToFloat64(m.fetches.WithLabelValues(FetchNotAllowed)); v != 1 {
			t.Errorf("fetches{result=not_allowed} = %v, want 1", v)
		}
	})
}

// fetch_truncated needs an allow-list; each bad entry is named by its key.
func TestAlertmanagerConfigValidate(t *testing.T) {
	c := ListenerConfig{Alertmanager: AlertmanagerConfig{FetchTruncated: true}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "alertmanager.allowed_urls") {
		t.Errorf("fetch_truncated without allowed_urls: %v", err)
	}
	c.Alertmanager.AllowedURLs = []string{"http://am:9093", "ftp://x", "http://u:p@am:9093", "http://169.254.169.254/", "http://instance-data"}
	c.Alertmanager.FetchTimeout = time.Hour
	err := c.Validate()
	for _, key := range []string{"alertmanager.allowed_urls[1]", "alertmanager.allowed_urls[2]", "alertmanager.allowed_urls[3]",
		"alertmanager.allowed_urls[4]", "alertmanager.fetch_timeout"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
	if err != nil && strings.Contains(err.Error(), "allowed_urls[0]") {
		t.Errorf("a valid URL was refused: %v", err)
	}
}
