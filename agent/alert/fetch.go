package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/internal/configerr"
)

// AlertmanagerConfig is intake.alertmanager: what the alert listener does about
// the alerts an Alertmanager left out of a notification (truncatedAlerts,
// past its max_alerts).
type AlertmanagerConfig struct {
	// FetchTruncated asks the sender's API v2 for the group's firing
	// alerts when a notification says some were left out.
	FetchTruncated bool `yaml:"fetch_truncated"`
	// AllowedURLs are the externalURL values whose API may be asked
	// (scheme, host and path as Alertmanager sends them); a payload
	// naming any other URL is never fetched from.
	AllowedURLs []string `yaml:"allowed_urls"`
	// FetchTimeout bounds one fetch, answer included (0: DefaultFetchTimeout).
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// FetchMax bounds the alerts taken from one answer (0: DefaultFetchMax).
	FetchMax int `yaml:"fetch_max"`
}

// Defaults and bounds of intake.alertmanager.
const (
	DefaultFetchTimeout = 5 * time.Second
	MaxFetchTimeout     = 30 * time.Second
	DefaultFetchMax     = 100
	MaxFetchMax         = 1000
	// maxFetchBody bounds the bytes read from one API answer.
	maxFetchBody = 4 << 20
)

// problems are the section's problems, keys under section.
func (c AlertmanagerConfig) problems(section string) []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, configerr.Errorf(configerr.JoinKey(section, key), format, args...))
	}
	if c.FetchTruncated && len(c.AllowedURLs) == 0 {
		add("allowed_urls", "must list the Alertmanager URLs to fetch from when fetch_truncated is true")
	}
	for i, u := range c.AllowedURLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil || p.RawQuery != "" {
			add(fmt.Sprintf("allowed_urls[%d]", i), "%q: must be an http(s) URL without credentials or query", u)
		} else if err := urlcheck.Check(u, urlcheck.Rules{AllowHTTP: true}); err != nil {
			// The outbound URL rules: never the metadata service or a
			// link-local address.
			errs = append(errs, &configerr.Error{Key: configerr.JoinKey(section, fmt.Sprintf("allowed_urls[%d]", i)), Err: err})
		}
	}
	if c.FetchTimeout < 0 || c.FetchTimeout > MaxFetchTimeout {
		add("fetch_timeout", "%s: must be between 0 (default %s) and %s", c.FetchTimeout, DefaultFetchTimeout, MaxFetchTimeout)
	}
	if c.FetchMax < 0 || c.FetchMax > MaxFetchMax {
		add("fetch_max", "%d: must be between 0 (default %d) and %d", c.FetchMax, DefaultFetchMax, MaxFetchMax)
	}
	return errs
}

// Results of a truncated-alerts fetch, the values of
// autodiag_alerts_truncated_fetches_total's result label.
const (
	FetchOK         = "ok"
	FetchNotAllowed = "not_allowed"
	FetchError      = "error"
)

// FetchResults lists them in a stable order.
func FetchResults() []string { return []string{FetchOK, FetchNotAllowed, FetchError} }

// TruncatedFetcher asks an Alertmanager's API v2 for the firing alerts of
// a group whose notification left some out.
type TruncatedFetcher struct {
	allowed map[string]bool
	timeout time.Duration
	max     int
	client  *http.Client
}

// NewTruncatedFetcher returns the fetcher of c, or nil when
// c.FetchTruncated is false. client nil: a client that follows no
// redirect (an allowed URL must not send the fetch elsewhere).
func NewTruncatedFetcher(c AlertmanagerConfig, client *http.Client) *TruncatedFetcher {
	if !c.FetchTruncated {
		return nil
	}
	f := &TruncatedFetcher{allowed: map[string]bool{}, timeout: c.FetchTimeout, max: c.FetchMax, client: client}
	if f.timeout <= 0 {
		f.timeout = DefaultFetchTimeout
	}
	if f.max <= 0 {
		f.max = DefaultFetchMax
	}
	if f.client == nil {
		f.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	for _, u := range c.AllowedURLs {
		f.allowed[normURL(u)] = true
	}
	return f
}

func normURL(u string) string { return strings.TrimRight(strings.TrimSpace(u), "/") }

// ErrNotAllowed says a payload's externalURL is not in allowed_urls.
var ErrNotAllowed = errors.New("alert: externalURL is not in intake.alertmanager.allowed_urls")

// gettableAlert is what API v2's GET /api/v2/alerts lists.
type gettableAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	Fingerprint string            `json:"fingerprint"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

// Fetch returns the active alerts of the group (its groupLabels as
// filters) from externalURL's API v2, at most the configured number, in
// one request bounded by the fetch timeout and maxFetchBody.
func (f *TruncatedFetcher) Fetch(ctx context.Context, externalURL string, group map[string]string) ([]Received, error) {
	base := normURL(externalURL)
	if !f.allowed[base] {
		return nil, ErrNotAllowed
	}
	q := url.Values{"active": {"true"}, "silenced": {"false"}, "inhibited": {"false"}}
	keys := make([]string, 0, len(group))
	for k := range group {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("filter", fmt.Sprintf("%s=%q", k, group[k]))
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v2/alerts?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("alert: fetch truncated alerts: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("alert: fetch truncated alerts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("alert: fetch truncated alerts: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetchBody+1))
	if err != nil {
		return nil, fmt.Errorf("alert: fetch truncated alerts: %w", err)
	}
	if len(body) > maxFetchBody {
		return nil, fmt.Errorf("alert: fetch truncated alerts: answer larger than %d bytes", maxFetchBody)
	}
	var got []gettableAlert
	if err := json.Unmarshal(body, &got); err != nil {
		return nil, fmt.Errorf("alert: fetch truncated alerts: %w", err)
	}
	out := make([]Received, 0, min(len(got), f.max))
	for _, a := range got {
		if len(out) == f.max {
			break
		}
		if a.Status.State != "" && a.Status.State != "active" {
			continue
		}
		out = append(out, amReceived(a.Fingerprint, a.Labels, a.Annotations, a.StartsAt, StatusFiring))
	}
	return out, nil
}
