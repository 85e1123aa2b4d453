package alert

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
)

// Sender puts tasks on the task queue: the agent's SQS queue
// (SendMessageBatch, 10 per call) in fleet mode, the embedded queue
// otherwise. An error means the tasks may not all be queued; the handler
// answers 503 so the alerting system retries the payload, and the
// limiter's dedupe on alert.event_id absorbs the repeats.
type Sender interface {
	SendBatch(ctx context.Context, tasks []task.Task) error
}

// Credentials are the secrets requests to the alert listener must carry,
// read from the environment by whoever starts the listener
// (ListenerConfig.Credentials).
// The zero value requires nothing: only a loopback listener may have it.
type Credentials struct {
	BearerToken   string
	BasicUser     string
	BasicPassword string
}

// DefaultSendTimeout bounds one SendBatch; it stays below
// DefaultWriteTimeout so the answer can still be written.
const DefaultSendTimeout = 10 * time.Second

// HandlerConfig is what NewHandler needs; Router and Sender are required.
type HandlerConfig struct {
	Router      *Router
	Sender      Sender
	Credentials Credentials
	// LiveCredentials, when set, gives the credentials in force for each
	// request instead of Credentials (AuthConfig.Live: a rotated secret
	// applies without a restart).
	LiveCredentials func() Credentials
	// MaxBody is the largest body read; past it the answer is 413. 0 =
	// DefaultMaxBody.
	MaxBody int64
	// Draining says the agent is draining: alerts are answered 503 so
	// senders retry elsewhere. nil = never.
	Draining func() bool
	// Metrics counts alerts; nil counts nothing.
	Metrics *Metrics
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock stamps the tasks' created_at; nil = the wall clock.
	Clock clock.Clock
	// SendTimeout bounds one SendBatch; 0 = DefaultSendTimeout.
	SendTimeout time.Duration
	// Fetcher fetches the alerts an Alertmanager left out of a
	// notification (intake.alertmanager.fetch_truncated); nil = none.
	Fetcher *TruncatedFetcher
}

// Handler is the alert listener's HTTP interface:
//
//	POST /v1/alerts/alertmanager   Alertmanager webhook, version 4
//	POST /v1/alerts/zabbix         the autodiag Zabbix media type
//	POST /v1/alerts/generic        {source, name, host, severity, event_id, labels}
//	GET  /readyz                   200, or 503 while draining (no auth)
//
// An accepted payload is answered 200 {"accepted": n, "ignored": [{index,
// reason}], "rejected": [{index, reason}]}; a malformed one 400, a
// missing or wrong credential 401, a body over MaxBody 413, a draining
// agent or a failed send 503.
type Handler struct {
	c   HandlerConfig
	mux *http.ServeMux
}

// Decoders by endpoint.
var decoders = map[string]func([]byte) (Payload, error){
	SourceAlertmanager: DecodeAlertmanager,
	SourceZabbix:       DecodeZabbix,
	SourceGeneric:      DecodeGeneric,
}

// NewHandler returns the alert listener's handler.
func NewHandler(c HandlerConfig) (*Handler, error) {
	if c.Router == nil || c.Sender == nil {
		return nil, errors.New("alert: handler needs a router and a sender")
	}
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	c.MaxBody = min(c.MaxBody, MaxBody)
	if c.Draining == nil {
		c.Draining = func() bool { return false }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Wall{}
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	h := &Handler{c: c, mux: http.NewServeMux()}
	for src := range decoders {
		h.mux.HandleFunc("POST /v1/alerts/"+src, h.post(src))
	}
	h.mux.HandleFunc("GET /readyz", h.readyz)
	return h, nil
}

// Handle serves pattern with hd beside the alert endpoints, under hd's
// own authentication (Slack's interactivity, which signs its requests).
func (h *Handler) Handle(pattern string, hd http.Handler) { h.mux.Handle(pattern, hd) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	if h.c.Draining() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"state": "draining", "status": "draining"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"state": "ready", "status": "ready"})
}

func (h *Handler) post(source string) http.HandlerFunc {
	decode := decoders[source]
	return func(w http.ResponseWriter, r *http.Request) {
		tctx, span := tracing.StartServer(r, "/v1/alerts/"+source)
		defer span.End()
		creds := h.c.Credentials
		if h.c.LiveCredentials != nil {
			creds = h.c.LiveCredentials()
		}
		if !creds.Authorized(r) {
			Unauthorized(w, creds, listenerRealm)
			return
		}
		if h.c.Draining() {
			writeJSON(w, http.StatusServiceUnavailable, errorBody("draining", "this agent is draining; send elsewhere"))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.c.MaxBody))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				writeJSON(w, http.StatusRequestEntityTooLarge, errorBody(ReasonTooLarge, "body exceeds intake.max_body"))
				return
			}
			writeJSON(w, http.StatusBadRequest, errorBody(ReasonMalformed, "reading the body: "+err.Error()))
			return
		}
		p, err := decode(body)
		if err != nil {
			h.c.Logger.Warn("alert payload refused", "source", source, "reason", Reason(err), "err", err)
			writeJSON(w, http.StatusBadRequest, errorBody(Reason(err), err.Error()))
			return
		}
		if source == SourceAlertmanager && p.Truncated > 0 && h.c.Fetcher != nil {
			h.fetchTruncated(r.Context(), &p)
		}
		ans := h.c.Router.RoutePayload(p, h.c.Clock.Now())
		traceAnswer(span, source, ans)
		if len(ans.Tasks) > 0 {
			ctx, cancel := context.WithTimeout(tctx, h.c.SendTimeout)
			err := h.c.Sender.SendBatch(ctx, ans.Tasks) //nolint:contextcheck // ctx is r.Context() with the request's span
			cancel()
			if err != nil {
				h.c.Logger.Error("alert tasks not queued", "source", source, "tasks", len(ans.Tasks), "err", err)
				writeJSON(w, http.StatusServiceUnavailable, errorBody("queue_unavailable", "the task queue did not take the tasks; retry"))
				return
			}
		}
		h.c.Metrics.Record(r.Context(), h.c.Logger, source, p, ans)
		writeJSON(w, http.StatusOK, ans)
	}
}

// listenerRealm names the alert listener in its challenges (after its
// command, `autodiag intake`).
const listenerRealm = "autodiag intake"

// Required reports whether c requires anything of a request.
func (c Credentials) Required() bool { return c.BearerToken != "" || c.BasicUser != "" }

// Authorized reports whether r carries c, comparing in constant time; both
// sides are hashed first so neither does a length mismatch answer early.
// The zero Credentials authorize every request.
func (c Credentials) Authorized(r *http.Request) bool {
	switch {
	case c.BearerToken != "":
		tok, ok := bearerToken(r.Header.Get("Authorization"))
		return ok && equal(tok, c.BearerToken)
	case c.BasicUser != "":
		u, p, ok := r.BasicAuth()
		// Both compared, always, so the time does not say which was wrong.
		uok, pok := equal(u, c.BasicUser), equal(p, c.BasicPassword)
		return ok && uok && pok
	}
	return true
}

// bearerToken is the token of an Authorization value in the Bearer
// scheme. The scheme is matched case-insensitively, as RFC 7235 (2.1)
// says of every auth-scheme: "bearer x" and "BEARER x" are "Bearer x".
// One or more spaces separate it from the token.
func bearerToken(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(tok, " "), true
}

// Challenge is the WWW-Authenticate value of a 401 for realm.
func (c Credentials) Challenge(realm string) string {
	if c.BasicUser != "" {
		return `Basic realm="` + realm + `"`
	}
	return `Bearer realm="` + realm + `"`
}

// SetOn makes req carry c, as a client of a listener that requires them.
func (c Credentials) SetOn(req *http.Request) {
	switch {
	case c.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+c.BearerToken)
	case c.BasicUser != "":
		req.SetBasicAuth(c.BasicUser, c.BasicPassword)
	}
}

// Unauthorized answers 401 with the challenge of c for realm.
func Unauthorized(w http.ResponseWriter, c Credentials, realm string) {
	w.Header().Set("WWW-Authenticate", c.Challenge(realm))
	writeJSON(w, http.StatusUnauthorized, errorBody("unauthorized", "missing or wrong credentials"))
}

func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func errorBody(reason, detail string) map[string]string {
	return map[string]string{"error": reason, "detail": detail}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fetchTruncated adds to p the group's alerts the notification left out,
// fetched from the sender's API v2: those whose event id the payload does
// not hold already, indexed after the payload's own. A fetch that fails
// or is not allowed leaves p as it came; it is counted and logged.
func (h *Handler) fetchTruncated(ctx context.Context, p *Payload) {
	got, err := h.c.Fetcher.Fetch(ctx, p.ExternalURL, p.GroupLabels)
	result := FetchOK
	switch {
	case errors.Is(err, ErrNotAllowed):
		result = FetchNotAllowed
		h.c.Logger.Warn("truncated alerts not fetched: externalURL not allowed", "source", SourceAlertmanager,
			"truncated", p.Truncated, "reason", FetchNotAllowed)
	case err != nil:
		result = FetchError
		h.c.Logger.Warn("truncated alerts not fetched", "source", SourceAlertmanager, "truncated", p.Truncated, "err", err)
	}
	h.c.Metrics.fetched(result)
	if err != nil {
		return
	}
	have := map[string]bool{}
	next := 0
	for _, it := range p.Items {
		have[it.Alert.EventID] = true
		next = max(next, it.Index+1)
	}
	for _, o := range append(p.Ignored, p.Rejected...) {
		next = max(next, o.Index+1)
	}
	added := 0
	for _, a := range got {
		if a.EventID != "" && have[a.EventID] {
			continue
		}
		p.add(next, a)
		next++
		added++
	}
	h.c.Logger.Info("truncated alerts fetched", "source", SourceAlertmanager, "truncated", p.Truncated, "fetched", len(got), "added", added)
}
