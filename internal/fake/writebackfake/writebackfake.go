package writebackfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// ZabbixMessageMax is the longest acknowledgement message Zabbix takes,
// in characters.
const ZabbixMessageMax = 2048

// OpsgenieNoteMax is the longest note Opsgenie takes, in characters.
const OpsgenieNoteMax = 25000

// Call is one request a stand-in saw.
type Call struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
}

// Base is what every stand-in shares: its server, the calls, and a
// storm: while set (SetStorm), every request is answered with its status.
type Base struct {
	*httptest.Server
	mu    sync.Mutex
	calls []Call
	storm int
	lose  int
	hold  chan struct{}
}

func (s *Base) record(r *http.Request) (Call, int) {
	body, _ := io.ReadAll(r.Body)
	c := Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	return c, s.storm
}

// SetStorm answers every request with code from now on (0: stop).
func (s *Base) SetStorm(code int) {
	s.mu.Lock()
	s.storm = code
	s.mu.Unlock()
}

// CallCount is how many requests the stand-in saw.
func (s *Base) CallCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// lost says whether this write's answer is to be lost, counting it.
func (s *Base) lost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lose > 0 {
		s.lose--
		return true
	}
	return false
}

func (s *Base) waitHold(r *http.Request) {
	s.mu.Lock()
	h := s.hold
	s.mu.Unlock()
	if h != nil {
		select {
		case <-h:
		case <-r.Context().Done():
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Zabbix is a Zabbix server of version (6.0: the token in the
// body's auth; 7.0: only the Authorization: Bearer header, as 7.2 refuses
// auth in the body), holding problem events and their acknowledgements.
type Zabbix struct {
	Base
	version, token string
	acks           map[string][]ZabbixAck // event id → acknowledgements
}

type ZabbixAck struct {
	Message  string `json:"message"`
	Action   int    `json:"action"`
	Severity int    `json:"severity"`
}

// NewZabbix starts a Zabbix API of version holding the problem events
// events (no acknowledgement yet), for token.
func NewZabbix(t testing.TB, version, token string, events ...string) *Zabbix {
	z := &Zabbix{version: version, token: token, acks: map[string][]ZabbixAck{}}
	for _, e := range events {
		z.acks[e] = nil
	}
	z.Server = httptest.NewServer(http.HandlerFunc(z.serve))
	t.Cleanup(z.Close)
	return z
}

func (z *Zabbix) serve(w http.ResponseWriter, r *http.Request) {
	c, storm := z.record(r)
	if storm != 0 {
		w.WriteHeader(storm)
		return
	}
	var req struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
		Auth    *string         `json:"auth"`
		ID      int             `json:"id"`
	}
	if r.URL.Path != "/api_jsonrpc.php" || r.Method != http.MethodPost ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(c.Body, &req) != nil || req.JSONRPC != "2.0" {
		writeJSON(w, 200, map[string]any{"jsonrpc": "2.0", "error": map[string]any{"code": -32600, "message": "Invalid request."}, "id": nil})
		return
	}
	fail := func(code int, msg, data string) {
		writeJSON(w, 200, map[string]any{"jsonrpc": "2.0", "error": map[string]any{"code": code, "message": msg, "data": data}, "id": req.ID})
	}
	ok := func(result any) { writeJSON(w, 200, map[string]any{"jsonrpc": "2.0", "result": result, "id": req.ID}) }
	bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if req.Method == "apiinfo.version" {
		if req.Auth != nil || r.Header.Get("Authorization") != "" {
			fail(-32602, "Invalid params.", `The "apiinfo.version" method must be called without authorization header.`)
			return
		}
		ok(z.version)
		return
	}
	switch {
	case strings.HasPrefix(z.version, "6.0"):
		if req.Auth == nil || *req.Auth != z.token {
			fail(-32602, "Invalid params.", "Not authorized.")
			return
		}
	default:
		if req.Auth != nil {
			fail(-32600, "Invalid request.", `Invalid parameter "/": unexpected parameter "auth".`)
			return
		}
		if bearer != z.token {
			fail(-32602, "Invalid params.", "Not authorized.")
			return
		}
	}
	switch req.Method {
	case "event.get":
		var p struct {
			EventIDs []string `json:"eventids"`
		}
		_ = json.Unmarshal(req.Params, &p)
		type event struct {
			EventID      string      `json:"eventid"`
			Acknowledges []ZabbixAck `json:"acknowledges"`
		}
		out := []event{}
		z.mu.Lock()
		for _, id := range p.EventIDs {
			if acks, found := z.acks[id]; found {
				out = append(out, event{EventID: id, Acknowledges: append([]ZabbixAck{}, acks...)})
			}
		}
		z.mu.Unlock()
		ok(out)
	case "event.acknowledge":
		z.waitHold(r)
		var p struct {
			EventIDs []string `json:"eventids"`
			Action   int      `json:"action"`
			Message  string   `json:"message"`
			Severity *int     `json:"severity"`
		}
		_ = json.Unmarshal(req.Params, &p)
		switch {
		case p.Action&4 != 0 && p.Message == "":
			fail(-32602, "Invalid params.", `Invalid parameter "/message": cannot be empty.`)
			return
		case utf8.RuneCountInString(p.Message) > ZabbixMessageMax:
			fail(-32602, "Invalid params.", `Invalid parameter "/message": value is too long.`)
			return
		case p.Action&8 != 0 && (p.Severity == nil || *p.Severity < 0 || *p.Severity > 5):
			fail(-32602, "Invalid params.", `Invalid parameter "/severity".`)
			return
		}
		z.mu.Lock()
		for _, id := range p.EventIDs {
			if _, found := z.acks[id]; !found {
				z.mu.Unlock()
				fail(-32500, "Application error.", "No permissions to referred object or it does not exist!")
				return
			}
		}
		ack := ZabbixAck{Message: p.Message, Action: p.Action}
		if p.Severity != nil {
			ack.Severity = *p.Severity
		}
		for _, id := range p.EventIDs {
			z.acks[id] = append(z.acks[id], ack)
		}
		z.mu.Unlock()
		if z.lost() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		ok(map[string]any{"eventids": p.EventIDs})
	default:
		fail(-32601, "Method not found.", "Incorrect API \""+req.Method+"\".")
	}
}

// Acks are the acknowledgements of event id, in order.
func (z *Zabbix) Acks(id string) []ZabbixAck {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]ZabbixAck(nil), z.acks[id]...)
}

// PagerDuty is the REST API v2: it holds incidents (id → incident key) and their notes,
// and wants a REST API key, the From header and the v2 Accept header.
type PagerDuty struct {
	Base
	token, from string
	keys        map[string]string   // incident id → incident key
	notes       map[string][]string // incident id → note contents
}

// NewPagerDuty starts a PagerDuty API holding incidents (id → incident
// key), for token and the user from.
func NewPagerDuty(t testing.TB, token, from string, incidents map[string]string) *PagerDuty {
	p := &PagerDuty{token: token, from: from, keys: incidents, notes: map[string][]string{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *PagerDuty) serve(w http.ResponseWriter, r *http.Request) {
	c, storm := p.record(r)
	if storm != 0 {
		w.WriteHeader(storm)
		return
	}
	pdErr := func(code int, msg string, num int) {
		writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "code": num}})
	}
	if r.Header.Get("Authorization") != "Token token="+p.token {
		pdErr(401, "Unauthorized", 2006)
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/vnd.pagerduty+json;version=2") {
		pdErr(400, "Invalid Input Provided", 2001)
		return
	}
	if r.URL.Path == "/incidents" && r.Method == http.MethodGet {
		key := r.URL.Query().Get("incident_key")
		out := []map[string]any{}
		p.mu.Lock()
		for id, k := range p.keys {
			if key != "" && k == key {
				out = append(out, map[string]any{"id": id, "type": "incident", "incident_key": k, "status": "triggered"})
			}
		}
		p.mu.Unlock()
		writeJSON(w, 200, map[string]any{"incidents": out, "limit": 25, "offset": 0, "more": false, "total": nil})
		return
	}
	rest, found := strings.CutPrefix(r.URL.Path, "/incidents/")
	id, sub, _ := strings.Cut(rest, "/")
	p.mu.Lock()
	_, known := p.keys[id]
	p.mu.Unlock()
	if !found || sub != "notes" || !known {
		pdErr(404, "Not Found", 2100)
		return
	}
	switch r.Method {
	case http.MethodGet:
		p.mu.Lock()
		out := []map[string]any{}
		for i, n := range p.notes[id] {
			out = append(out, map[string]any{"id": fmt.Sprintf("PN%d", i), "content": n, "created_at": "2026-12-01T14:51:00Z",
				"user": map[string]any{"id": "PU1", "type": "user_reference"}})
		}
		p.mu.Unlock()
		writeJSON(w, 200, map[string]any{"notes": out})
	case http.MethodPost:
		p.waitHold(r)
		if !strings.Contains(r.Header.Get("From"), "@") || r.Header.Get("From") != p.from {
			pdErr(400, "Invalid Input Provided", 2001)
			return
		}
		var in struct {
			Note struct {
				Content string `json:"content"`
			} `json:"note"`
		}
		if json.Unmarshal(c.Body, &in) != nil || in.Note.Content == "" {
			pdErr(400, "Invalid Input Provided", 2001)
			return
		}
		p.mu.Lock()
		p.notes[id] = append(p.notes[id], in.Note.Content)
		p.mu.Unlock()
		if p.lost() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		writeJSON(w, 201, map[string]any{"note": map[string]any{"id": "PN9", "content": in.Note.Content}})
	default:
		pdErr(404, "Not Found", 2100)
	}
}

// Notes are the contents of incident id's notes, in order.
func (p *PagerDuty) Notes(id string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.notes[id]...)
}

// Opsgenie is the Alert API v2: it holds alerts by alias and their notes, and wants a
// GenieKey and identifierType=alias.
type Opsgenie struct {
	Base
	token string
	notes map[string][]string // alias → notes
}

// NewOpsgenie starts an Opsgenie API holding alerts of aliases, for
// token.
func NewOpsgenie(t testing.TB, token string, aliases ...string) *Opsgenie {
	o := &Opsgenie{token: token, notes: map[string][]string{}}
	for _, a := range aliases {
		o.notes[a] = nil
	}
	o.Server = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.Close)
	return o
}

func (o *Opsgenie) serve(w http.ResponseWriter, r *http.Request) {
	c, storm := o.record(r)
	if storm != 0 {
		w.WriteHeader(storm)
		return
	}
	ogErr := func(code int, msg string) {
		writeJSON(w, code, map[string]any{"message": msg, "took": 0.001, "requestId": "req-err"})
	}
	if r.Header.Get("Authorization") != "GenieKey "+o.token {
		ogErr(401, "Could not authenticate")
		return
	}
	rest, found := strings.CutPrefix(r.URL.Path, "/v2/alerts/")
	alias, sub, _ := strings.Cut(rest, "/")
	if !found || sub != "notes" || r.URL.Query().Get("identifierType") != "alias" {
		ogErr(404, "Not found")
		return
	}
	o.mu.Lock()
	_, known := o.notes[alias]
	o.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && !known:
		ogErr(404, "Alert does not exist")
	case r.Method == http.MethodGet:
		o.mu.Lock()
		out := []map[string]any{}
		for i, n := range o.notes[alias] {
			out = append(out, map[string]any{"note": n, "owner": "autodiag", "createdAt": "2026-12-01T14:51:00Z", "offset": fmt.Sprint(i)})
		}
		o.mu.Unlock()
		writeJSON(w, 200, map[string]any{"data": out, "paging": map[string]any{}, "took": 0.01, "requestId": "req-1"})
	case r.Method == http.MethodPost:
		o.waitHold(r)
		var in struct {
			Note   string `json:"note"`
			User   string `json:"user"`
			Source string `json:"source"`
		}
		if json.Unmarshal(c.Body, &in) != nil || in.Note == "" || utf8.RuneCountInString(in.Note) > OpsgenieNoteMax {
			ogErr(422, "Note should be at most 25000 characters")
			return
		}
		// The API answers 202 and applies the note asynchronously; the
		// stand-in applies it at once.
		o.mu.Lock()
		if known {
			o.notes[alias] = append(o.notes[alias], in.Note)
		}
		o.mu.Unlock()
		if o.lost() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		writeJSON(w, 202, map[string]any{"result": "Request will be processed", "took": 0.2, "requestId": "req-2"})
	default:
		ogErr(404, "Not found")
	}
}

// Notes are the notes of the alert with alias, in order.
func (o *Opsgenie) Notes(alias string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.notes[alias]...)
}

// Slack is the Web API's chat.postMessage for a bot token: it
// gives each message a ts and records channel, text and thread_ts.
type Slack struct {
	Base
	token, channel string
	msgs           []SlackMessage
}

type SlackMessage struct {
	Channel, TS, ThreadTS, Text string
	Blocks                      json.RawMessage
}

// NewSlack starts a Slack Web API for the bot token and one channel.
func NewSlack(t testing.TB, token, channel string) *Slack {
	s := &Slack{token: token, channel: channel}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Slack) serve(w http.ResponseWriter, r *http.Request) {
	c, storm := s.record(r)
	if storm != 0 {
		w.WriteHeader(storm)
		return
	}
	if r.URL.Path != "/chat.postMessage" || r.Method != http.MethodPost {
		writeJSON(w, 200, map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeJSON(w, 200, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	var p struct {
		Channel  string          `json:"channel"`
		Text     string          `json:"text"`
		Blocks   json.RawMessage `json:"blocks"`
		ThreadTS string          `json:"thread_ts"`
	}
	if json.Unmarshal(c.Body, &p) != nil || p.Text == "" {
		writeJSON(w, 200, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	if p.Channel != s.channel {
		writeJSON(w, 200, map[string]any{"ok": false, "error": "channel_not_found"})
		return
	}
	s.waitHold(r)
	s.mu.Lock()
	if p.ThreadTS != "" && !s.hasTS(p.ThreadTS) {
		s.mu.Unlock()
		writeJSON(w, 200, map[string]any{"ok": false, "error": "thread_not_found"})
		return
	}
	ts := fmt.Sprintf("1764600000.%06d", len(s.msgs)+1)
	s.msgs = append(s.msgs, SlackMessage{Channel: p.Channel, TS: ts, ThreadTS: p.ThreadTS, Text: p.Text, Blocks: p.Blocks})
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"ok": true, "channel": p.Channel, "ts": ts, "message": map[string]any{"text": p.Text, "ts": ts}})
}

func (s *Slack) hasTS(ts string) bool {
	for _, m := range s.msgs {
		if m.TS == ts {
			return true
		}
	}
	return false
}

// Messages are the messages posted, in order.
func (s *Slack) Messages() []SlackMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SlackMessage(nil), s.msgs...)
}

// Lose makes the next n writes apply and then answer 502, as an answer
// lost on its way back.
func (s *Base) Lose(n int) {
	s.mu.Lock()
	s.lose = n
	s.mu.Unlock()
}

// Hold holds every write until the returned func is called.
func (s *Base) Hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Calls are the requests the stand-in saw, in order.
func (s *Base) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// AddIncident adds an incident (id, incident key) to the stand-in.
func (p *PagerDuty) AddIncident(id, key string) {
	p.mu.Lock()
	p.keys[id] = key
	p.mu.Unlock()
}
