package notify

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/fake/writebackfake"
	"github.com/autodiag/autodiag/internal/testenv"
)

const (
	wbToken   = "wb-token-0123456789"
	wbFrom    = "oncall@example.com"
	wbTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// wbEnv is the environment the write-back sinks read their tokens from.
func wbEnv(k string) (string, bool) {
	switch k {
	case "ZBX_TOKEN", "PD_TOKEN", "OG_KEY":
		return wbToken, true
	case "SLACK_BOT":
		return "xoxb-" + wbToken, true
	}
	return "", false
}

// wbReport is a report event for task id of alert a: a confidence, an
// answer of answerLen bytes, evidence.
func wbReport(id string, a *taskview.Alert, answerLen int) Event {
	md := "## Root cause\nThe disk /var filled with journal files.\n" + strings.Repeat("evidence line ", answerLen/14) + "\nConfidence: likely\n"
	inv := &report.Investigation{Evidence: []string{"t-ev-1", "t-ev-2"}}
	raw, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", Markdown: md, Investigation: inv})
	return Event{Type: EventReport, ID: "d-" + id, InstanceID: "i-a",
		Task: &taskview.Task{ID: id, Host: "web-05.example.com", Diagnostic: "uptime", Alert: a, Outcome: "succeeded",
			Report: raw, TraceID: wbTraceID}}
}

func wbSink(t *testing.T, c SinkConfig, threads ThreadStore) Sink {
	t.Helper()
	c.AllowHTTP = true
	if c.On == nil {
		c.On = append(EventTypes[:5:5], EventResolved)
	}
	sinks, err := NewSinksWith([]SinkConfig{c}, SinkDeps{Getenv: wbEnv, Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	return sinks[0]
}

func deliveryOf(t *testing.T, ev Event) Delivery {
	t.Helper()
	body, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return Delivery{Entry: Entry{ID: ev.ID, Event: ev.Type, Body: body}, Attempt: 1}
}

// checkNote checks what a write-back wrote: within limit characters, with
// the task id, the trace id, the delivery's mark, the confidence and the
// evidence, and where the whole is.
func checkNote(t *testing.T, note string, ev Event, limit int) {
	t.Helper()
	if n := utf8.RuneCountInString(note); n > limit {
		t.Errorf("note of %d characters, want at most %d", n, limit)
	}
	for _, want := range []string{"task " + ev.Task.ID, "trace " + wbTraceID, deliveryMark(ev.ID), "Confidence: likely",
		"Evidence (task ids): t-ev-1, t-ev-2", "autodiag show " + ev.Task.ID, "The disk /var filled"} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
}

func isPermanent(err error) bool {
	var se *SendError
	return errors.As(err, &se) && se.Permanent
}

func TestZabbixAcknowledgesOnce(t *testing.T) {
	tests := []struct {
		name, server, configured string
		severity                 string
		wantBearer               bool
	}{
		{"6.0 configured: auth in the body", "6.0.30", "6.0", "", false},
		{"7.0 configured: bearer header", "7.0.5", "7.0", "", true},
		{"6.0 asked with apiinfo.version", "6.0.30", "", "", false},
		{"7.0 asked, severity changed too", "7.0.5", "", "high", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := writebackfake.NewZabbix(t, tt.server, wbToken, "4242")
			s := wbSink(t, SinkConfig{Name: "zbx", Type: TypeZabbix, URL: z.URL + "/api_jsonrpc.php", TokenEnv: "ZBX_TOKEN",
				Version: tt.configured, Severity: tt.severity}, nil)
			// A resolved alert is written on the event that fired.
			ev := wbReport("t-1", &taskview.Alert{Source: "zabbix", Name: "Disk full", EventID: "4242/resolved"}, 6000)
			d := deliveryOf(t, ev)
			for range 2 { // the second is a retry of the same delivery
				if err := s.Send(context.Background(), d); err != nil {
					t.Fatal(err)
				}
			}
			acks := z.Acks("4242")
			if len(acks) != 1 {
				t.Fatalf("%d acknowledgements, want 1: %+v", len(acks), acks)
			}
			checkNote(t, acks[0].Message, ev, ZabbixMessageMax)
			wantAction := 4
			if tt.severity != "" {
				wantAction = 4 | 8
			}
			if acks[0].Action != wantAction || (tt.severity == "high" && acks[0].Severity != 4) {
				t.Errorf("action %d severity %d, want action %d", acks[0].Action, acks[0].Severity, wantAction)
			}
			versionAsks := 0
			for _, c := range z.Calls() {
				if strings.Contains(string(c.Body), "apiinfo.version") {
					versionAsks++
					continue
				}
				hasBearer := c.Header.Get("Authorization") == "Bearer "+wbToken
				hasAuth := strings.Contains(string(c.Body), `"auth":"`+wbToken+`"`)
				if hasBearer != tt.wantBearer || hasAuth == tt.wantBearer {
					t.Errorf("token placement: bearer %v, auth in body %v; want bearer %v", hasBearer, hasAuth, tt.wantBearer)
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tt.configured != ""]; versionAsks != want {
				t.Errorf("apiinfo.version asked %d times, want %d", versionAsks, want)
			}
		})
	}
}

// An acknowledgement Zabbix applied but whose answer was lost is found by
// its delivery mark on the retry, not written twice; a token Zabbix
// refuses is given up at once.
func TestZabbixRetryAndRefusal(t *testing.T) {
	z := writebackfake.NewZabbix(t, "7.0.5", wbToken, "77")
	z.Lose(1)
	s := wbSink(t, SinkConfig{Name: "zbx", Type: TypeZabbix, URL: z.URL + "/api_jsonrpc.php", TokenEnv: "ZBX_TOKEN", Version: "7.0"}, nil)
	ev := wbReport("t-2", &taskview.Alert{Source: "zabbix", EventID: "77"}, 100)
	d := deliveryOf(t, ev)
	if err := s.Send(context.Background(), d); err == nil || isPermanent(err) {
		t.Fatalf("lost answer: %v, want a retryable error", err)
	}
	if err := s.Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if n := len(z.Acks("77")); n != 1 {
		t.Fatalf("%d acknowledgements after a lost answer and a retry, want 1", n)
	}

	bad := writebackfake.NewZabbix(t, "7.0.5", "other-token", "77")
	s = wbSink(t, SinkConfig{Name: "zbx", Type: TypeZabbix, URL: bad.URL + "/api_jsonrpc.php", TokenEnv: "ZBX_TOKEN", Version: "7.0"}, nil)
	err := s.Send(context.Background(), d)
	var se *SendError
	if !errors.As(err, &se) || !se.Permanent || se.reason() != ReasonAPIError || strings.Contains(err.Error(), wbToken) {
		t.Fatalf("refused token: %v, want a permanent api_error without the token", err)
	}
}

func TestPagerDutyNoteOnce(t *testing.T) {
	tests := []struct {
		name string
		refs taskview.AlertRefs
	}{
		{"by incident id", taskview.AlertRefs{PagerDutyIncidentID: "PT4KHLK"}},
		{"by incident key", taskview.AlertRefs{PagerDutyIncidentKey: "srv01/HTTP"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pd := writebackfake.NewPagerDuty(t, wbToken, wbFrom, map[string]string{"PT4KHLK": "srv01/HTTP", "POTHER1": "other"})
			pd.Lose(1)
			s := wbSink(t, SinkConfig{Name: "pd", Type: TypePagerDuty, URL: pd.URL, TokenEnv: "PD_TOKEN", From: wbFrom}, nil)
			ev := wbReport("t-3", &taskview.Alert{Source: "alertmanager", Name: "HighLoad", EventID: "fp@t", Refs: tt.refs}, 20000)
			d := deliveryOf(t, ev)
			if err := s.Send(context.Background(), d); err == nil || isPermanent(err) {
				t.Fatalf("lost answer: %v, want a retryable error", err)
			}
			if err := s.Send(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			notes := pd.Notes("PT4KHLK")
			if len(notes) != 1 || len(pd.Notes("POTHER1")) != 0 {
				t.Fatalf("notes %q, want one on PT4KHLK", notes)
			}
			checkNote(t, notes[0], ev, NoteMax)
		})
	}
	// A key no incident has yet is retried, not given up.
	pd := writebackfake.NewPagerDuty(t, wbToken, wbFrom, map[string]string{})
	s := wbSink(t, SinkConfig{Name: "pd", Type: TypePagerDuty, URL: pd.URL, TokenEnv: "PD_TOKEN", From: wbFrom}, nil)
	ev := wbReport("t-4", &taskview.Alert{Source: "generic", EventID: "later-key"}, 100)
	if err := s.Send(context.Background(), deliveryOf(t, ev)); err == nil || isPermanent(err) {
		t.Fatalf("unknown incident key: %v, want a retryable error", err)
	}
	pd.AddIncident("PNEW", "later-key")
	if err := s.Send(context.Background(), deliveryOf(t, ev)); err != nil || len(pd.Notes("PNEW")) != 1 {
		t.Fatalf("after the incident appeared: %v, notes %q", err, pd.Notes("PNEW"))
	}
}

func TestOpsgenieNoteOnce(t *testing.T) {
	og := writebackfake.NewOpsgenie(t, wbToken, "web-05-highload")
	og.Lose(1)
	s := wbSink(t, SinkConfig{Name: "og", Type: TypeOpsgenie, URL: og.URL, TokenEnv: "OG_KEY"}, nil)
	ev := wbReport("t-5", &taskview.Alert{Source: "alertmanager", EventID: "fp@t", Refs: taskview.AlertRefs{OpsgenieAlias: "web-05-highload"}}, 30000)
	d := deliveryOf(t, ev)
	if err := s.Send(context.Background(), d); err == nil || isPermanent(err) {
		t.Fatalf("lost answer: %v, want a retryable error", err)
	}
	if err := s.Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	notes := og.Notes("web-05-highload")
	if len(notes) != 1 {
		t.Fatalf("%d notes, want 1", len(notes))
	}
	checkNote(t, notes[0], ev, NoteMax)
	// An alias Opsgenie does not know (yet) is retried.
	ev = wbReport("t-6", &taskview.Alert{Source: "generic", EventID: "not-there"}, 100)
	if err := s.Send(context.Background(), deliveryOf(t, ev)); err == nil || isPermanent(err) {
		t.Fatalf("unknown alias: %v, want a retryable error", err)
	}
}

// Events that name nothing a write-back sink can write on are not
// written to the outbox for it.
func TestWriteBackTargets(t *testing.T) {
	var sinks []Sink
	for _, c := range []SinkConfig{
		{Name: "zbx", Type: TypeZabbix, URL: "https://zabbix.example.com/api_jsonrpc.php", TokenEnv: "ZBX_TOKEN", On: []EventType{EventReport}},
		{Name: "pd", Type: TypePagerDuty, TokenEnv: "PD_TOKEN", From: wbFrom, On: []EventType{EventReport}},
		{Name: "og", Type: TypeOpsgenie, TokenEnv: "OG_KEY", On: []EventType{EventReport}},
	} {
		sinks = append(sinks, wbSink(t, c, nil))
	}
	d, err := NewDispatcher(NewMemoryOutbox(MemoryOptions{}), sinks, Options{InstanceID: "i-a"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		alert *taskview.Alert
		want  []string
	}{
		{"no alert", nil, nil},
		{"alertmanager without refs", &taskview.Alert{Source: "alertmanager", EventID: "fp@t"}, nil},
		{"zabbix", &taskview.Alert{Source: "zabbix", EventID: "12"}, []string{"zbx"}},
		{"alertmanager with refs", &taskview.Alert{Source: "alertmanager", EventID: "fp@t",
			Refs: taskview.AlertRefs{PagerDutyIncidentKey: "k", OpsgenieAlias: "a", ZabbixEventID: "9"}}, []string{"zbx", "pd", "og"}},
		{"generic names its own ids", &taskview.Alert{Source: "generic", EventID: "x"}, []string{"pd", "og"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, err := d.Entries(wbReport("t", tt.alert, 10))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Sink)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("entries for %v, want %v", got, tt.want)
			}
			for _, c := range []string{"zbx", "pd", "og"} {
				cfg := SinkConfig{Name: c, Type: map[string]string{"zbx": TypeZabbix, "pd": TypePagerDuty, "og": TypeOpsgenie}[c], On: []EventType{EventReport}}
				if SinkApplies(cfg, wbReport("t", tt.alert, 10)) != slices.Contains(tt.want, c) {
					t.Errorf("SinkApplies(%s) disagrees with the sink", c)
				}
			}
		})
	}
}

// settled says whether every entry left in ob failed its try-th try and
// waits for its retry (dead ones are gone from it).
func settled(ob *MemoryOutbox, try int) bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for _, e := range ob.entries {
		if e.claims != try || e.retryAt.IsZero() {
			return false
		}
	}
	return true
}

// A storm of 503s on every write-back API: each sink's entry is tried
// MaxAttempts times, with backoff, then dead-lettered (counted), nothing
// written; requeued once the APIs are back, each note arrives once.
func TestWriteBackStormIsRetriedThenDeadLettered(t *testing.T) {
	z := writebackfake.NewZabbix(t, "7.0.5", wbToken, "4242")
	pd := writebackfake.NewPagerDuty(t, wbToken, wbFrom, map[string]string{"PT4KHLK": "k"})
	og := writebackfake.NewOpsgenie(t, wbToken, "alias-1")
	sl := writebackfake.NewSlack(t, "xoxb-"+wbToken, "C0123")
	stands := []*writebackfake.Base{&z.Base, &pd.Base, &og.Base, &sl.Base}
	for _, s := range stands {
		s.SetStorm(http.StatusServiceUnavailable)
	}
	clock := newFakeClock()
	ob := NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, Clock: clock})
	var sinks []Sink
	for _, c := range []SinkConfig{
		{Name: "zbx", Type: TypeZabbix, URL: z.URL + "/api_jsonrpc.php", TokenEnv: "ZBX_TOKEN", Version: "7.0"},
		{Name: "pd", Type: TypePagerDuty, URL: pd.URL, TokenEnv: "PD_TOKEN", From: wbFrom},
		{Name: "og", Type: TypeOpsgenie, URL: og.URL, TokenEnv: "OG_KEY"},
		{Name: "slack", Type: TypeSlack, URL: sl.URL, BotTokenEnv: "SLACK_BOT", Channel: "C0123"},
	} {
		c.Timeout = testIdle / 3
		sinks = append(sinks, wbSink(t, c, NewMemoryThreads(clock)))
	}
	reg := prometheus.NewPedanticRegistry()
	d, err := NewDispatcher(ob, sinks, Options{InstanceID: "i-a", Clock: clock, Registerer: reg, PollInterval: time.Millisecond,
		MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Second, Rand: func() float64 { return 0.5 },
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runDispatcher(t, d)
	ev := wbReport("t-7", &taskview.Alert{Source: "zabbix", EventID: "4242",
		Refs: taskview.AlertRefs{PagerDutyIncidentID: "PT4KHLK", OpsgenieAlias: "alias-1"}}, 100)
	if _, err := d.Enqueue(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	dead := func() float64 {
		n := 0.0
		for _, s := range []string{"zbx", "pd", "og", "slack"} {
			n += testutil.ToFloat64(d.m.total.WithLabelValues(s, string(EventReport), ResultDead))
		}
		return n
	}
	for try := 1; dead() < 4; try++ {
		if try > 3 {
			t.Fatalf("tried %d times, %v dead", try, dead())
		}
		waitFor(t, 5*time.Second, "every sink's try ends", func() bool { return settled(ob, try) })
		clock.Add(time.Second)
	}
	for i, s := range stands {
		if n := s.CallCount(); n != 3 {
			t.Errorf("stand-in %d saw %d requests, want 3 (one per attempt)", i, n)
		}
	}
	list, _ := ob.ListDead(context.Background(), 10)
	if len(list) != 4 || slices.ContainsFunc(list, func(e DeadEntry) bool { return e.Reason != "max_attempts" || e.Attempts != 3 }) {
		t.Fatalf("dead list %+v, want the 4 sinks' entries after 3 attempts", list)
	}
	if len(z.Acks("4242"))+len(pd.Notes("PT4KHLK"))+len(og.Notes("alias-1"))+len(sl.Messages()) != 0 {
		t.Fatal("something was written during the storm")
	}

	for _, s := range stands {
		s.SetStorm(0)
	}
	var refs []string
	for _, e := range list {
		refs = append(refs, e.Ref)
	}
	if n, err := ob.Requeue(context.Background(), refs); n != 4 || err != nil {
		t.Fatalf("requeue: %d %v", n, err)
	}
	d.signal()
	waitFor(t, 5*time.Second, "the requeued notes delivered", func() bool {
		n := 0.0
		for _, s := range []string{"zbx", "pd", "og", "slack"} {
			n += testutil.ToFloat64(d.m.total.WithLabelValues(s, string(EventReport), ResultDelivered))
		}
		return n == 4
	})
	if len(z.Acks("4242")) != 1 || len(pd.Notes("PT4KHLK")) != 1 || len(og.Notes("alias-1")) != 1 || len(sl.Messages()) != 1 {
		t.Fatal("want exactly one note on each system after the storm")
	}
}

// alertEvent is a task event of type typ for task id, of alert a (nil:
// none), its parent parent.
func alertEvent(typ EventType, id, parent string, a *taskview.Alert) Event {
	return Event{Type: typ, ID: "d-" + string(typ) + "-" + id, InstanceID: "i-a",
		Task: &taskview.Task{ID: id, Host: "web-05.example.com", Diagnostic: "uptime", Alert: a, Parent: parent,
			Outcome: "succeeded", Output: "load average: 9.1", TraceID: wbTraceID}}
}

// The alert's events, delivered one after another by the dispatcher,
// end in one thread in order: the task's result, an investigation's tool
// call (which names the task as its parent), the report, the resolution;
// another alert starts its own thread. Embedded (memory) and fleet (Redis) stores.
func TestSlackBotThreadsAnAlert(t *testing.T) {
	stores := map[string]func(t *testing.T) ThreadStore{
		"memory": func(*testing.T) ThreadStore { return NewMemoryThreads(nil) },
		"redis": func(t *testing.T) ThreadStore {
			rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
			t.Cleanup(func() { _ = rc.Close() })
			return NewRedisThreads(rc, "wbtest:"+NewID()+":") // a run of its own
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			sl := writebackfake.NewSlack(t, "xoxb-"+wbToken, "C0123")
			s := wbSink(t, SinkConfig{Name: "slack", Type: TypeSlack, URL: sl.URL, BotTokenEnv: "SLACK_BOT", Channel: "C0123"}, store(t))
			reg := prometheus.NewPedanticRegistry()
			d, err := NewDispatcher(NewMemoryOutbox(MemoryOptions{}), []Sink{s}, Options{InstanceID: "i-a", Registerer: reg,
				PollInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			runDispatcher(t, d)
			alertA := &taskview.Alert{Source: "alertmanager", Name: "HighLoad", EventID: "00644e376eb6762e@2026-12-01T14:50:26Z"}
			alertB := &taskview.Alert{Source: "alertmanager", Name: "HighLoad", EventID: "f3cd2dbf84b33e4b@2026-12-01T14:50:26Z"}
			events := []Event{
				alertEvent(EventSucceeded, "t-a", "", alertA),
				alertEvent(EventSucceeded, "t-call-1", "t-a", nil),
				alertEvent(EventSucceeded, "t-b", "", alertB),
				wbReport("t-a", alertA, 200),
				alertEvent(EventResolved, "t-a", "", alertA),
			}
			for i, ev := range events {
				if _, err := d.Enqueue(context.Background(), ev); err != nil {
					t.Fatal(err)
				}
				// Delivered is acknowledged: the sink has kept the thread.
				waitFor(t, 5*time.Second, "delivered", func() bool {
					n, _ := d.Outbox().Pending(context.Background(), "slack")
					return len(sl.Messages()) == i+1 && n == 0
				})
			}
			m := sl.Messages()
			if m[0].ThreadTS != "" || m[2].ThreadTS != "" {
				t.Fatalf("the alerts' first messages are in a thread: %+v", m)
			}
			if m[1].ThreadTS != m[0].TS || m[3].ThreadTS != m[0].TS || m[4].ThreadTS != m[0].TS || !strings.Contains(m[4].Text, "alert resolved") {
				t.Fatalf("alert A's later events are not under its first message %s: %+v", m[0].TS, m)
			}
			if !strings.Contains(m[3].Text, "report ready") || !strings.Contains(m[1].Text, "t-call-1") && !strings.Contains(m[1].Text, "uptime") {
				t.Fatalf("thread out of order: %+v", m)
			}
		})
	}
}

// Two events of one alert delivered at once: one posts the first message,
// the other is retried until its ts is known, so the thread has one root.
// A delivery already posted is not posted again.
func TestSlackBotOneRootUnderRace(t *testing.T) {
	sl := writebackfake.NewSlack(t, "xoxb-"+wbToken, "C0123")
	release := sl.Hold()
	s := wbSink(t, SinkConfig{Name: "slack", Type: TypeSlack, URL: sl.URL, BotTokenEnv: "SLACK_BOT", Channel: "C0123"}, NewMemoryThreads(nil))
	a := &taskview.Alert{Source: "zabbix", EventID: "4242"}
	first := deliveryOf(t, alertEvent(EventSucceeded, "t-1", "", a))
	second := deliveryOf(t, alertEvent(EventFailed, "t-2", "", a))
	var wg sync.WaitGroup
	var firstErr error
	wg.Add(1)
	go func() { defer wg.Done(); firstErr = s.Send(context.Background(), first) }()
	waitFor(t, 5*time.Second, "the first post reaches Slack", func() bool { return sl.CallCount() == 1 })
	if err := s.Send(context.Background(), second); !errors.Is(err, errThreadStarting) {
		t.Fatalf("second while the first posts: %v, want errThreadStarting", err)
	}
	release()
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	for _, d := range []Delivery{second, first} {
		if err := s.Send(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	m := sl.Messages()
	if len(m) != 2 || m[0].ThreadTS != "" || m[1].ThreadTS != m[0].TS {
		t.Fatalf("messages %+v, want a root and one reply", m)
	}
}

func TestWriteBackConfig(t *testing.T) {
	ok := []SinkConfig{
		{Name: "z", Type: TypeZabbix, URL: "https://zabbix.example.com/api_jsonrpc.php", TokenEnv: "T", Version: "6.0", Severity: "high", On: []EventType{EventReport}},
		{Name: "p", Type: TypePagerDuty, TokenSecret: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pd", From: wbFrom, On: []EventType{EventReport}},
		{Name: "o", Type: TypeOpsgenie, URL: "https://api.eu.opsgenie.com", TokenEnv: "T", On: []EventType{EventReport, EventFailed}},
		{Name: "s", Type: TypeSlack, BotTokenEnv: "B", Channel: "C0123", On: EventTypes},
	}
	if err := ValidateSinks(ok); err != nil {
		t.Fatalf("valid write-back sinks: %v", err)
	}
	tests := []struct {
		name, key, says string
		c               SinkConfig
	}{
		{"zabbix without token", "[0].token_env", "API token", SinkConfig{Name: "z", Type: TypeZabbix, URL: "https://z.example.com/", On: []EventType{EventReport}}},
		{"zabbix without url", "[0].url", "must be set", SinkConfig{Name: "z", Type: TypeZabbix, TokenEnv: "T", On: []EventType{EventReport}}},
		{"zabbix on a drain", "[0].on[0]", "drain", SinkConfig{Name: "z", Type: TypeZabbix, URL: "https://z.example.com/", TokenEnv: "T", On: []EventType{EventDrainStarted}}},
		{"zabbix bad version", "[0].version", "6.0", SinkConfig{Name: "z", Type: TypeZabbix, URL: "https://z.example.com/", TokenEnv: "T", Version: "seven", On: []EventType{EventReport}}},
		{"zabbix bad severity", "[0].severity", "not one of", SinkConfig{Name: "z", Type: TypeZabbix, URL: "https://z.example.com/", TokenEnv: "T", Severity: "5", On: []EventType{EventReport}}},
		{"pagerduty without from", "[0].from", "email", SinkConfig{Name: "p", Type: TypePagerDuty, TokenEnv: "T", On: []EventType{EventReport}}},
		{"two tokens", "[0].token_secret", "exclusive", SinkConfig{Name: "o", Type: TypeOpsgenie, TokenEnv: "T", TokenSecret: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:x", On: []EventType{EventReport}}},
		{"bot without channel", "[0].channel", "channel", SinkConfig{Name: "s", Type: TypeSlack, BotTokenEnv: "B", On: EventTypes}},
		{"channel on a webhook", "[0].channel", "bot_token_env", SinkConfig{Name: "s", Type: TypeSlack, URLEnv: "U", Channel: "C1", On: EventTypes}},
		{"token on a webhook", "[0].token_env", "only", SinkConfig{Name: "w", Type: TypeWebhook, URL: "https://h.example.com/", TokenEnv: "T", On: EventTypes}},
		{"metadata service", "[0].url", "metadata", SinkConfig{Name: "o", Type: TypeOpsgenie, URL: "http://169.254.169.254/", AllowHTTP: true, TokenEnv: "T", On: []EventType{EventReport}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateSinks([]SinkConfig{tt.c})
			if err == nil || !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got %v, want %s: …%s…", err, tt.key, tt.says)
			}
		})
	}
	// A token variable that is not set stops the start, naming it.
	_, err := NewSinksWith(ok[:1], SinkDeps{Getenv: func(string) (string, bool) { return "", false }})
	if err == nil || !strings.Contains(err.Error(), "environment variable T is not set") {
		t.Fatalf("unset token: %v", err)
	}
	// An endpoint from the environment passes the outbound URL rules.
	_, err = NewSinksWith([]SinkConfig{{Name: "z", Type: TypeZabbix, URLEnv: "ZURL", AllowHTTP: true, TokenEnv: "T", On: []EventType{EventReport}}},
		SinkDeps{Getenv: func(k string) (string, bool) {
			return map[string]string{"ZURL": "http://169.254.169.254/api_jsonrpc.php", "T": "x"}[k], true
		}})
	if err == nil || !strings.Contains(err.Error(), "metadata") || strings.Contains(err.Error(), "169.254") {
		t.Fatalf("metadata URL from the environment: %v", err)
	}
}

// noteText keeps its footer whole, whatever the answer's size, and never
// cuts inside a rune.
func TestNoteTextBounds(t *testing.T) {
	for _, n := range []int{0, 100, 2040, 5000, 100000} {
		ev := wbReport("t-9", &taskview.Alert{Source: "zabbix", EventID: "1"}, n)
		for _, limit := range []int{ZabbixMessageMax, NoteMax} {
			got := noteText(ev, limit)
			if len(got) > limit || !utf8.ValidString(got) || !strings.HasSuffix(got, "whole: autodiag show t-9") ||
				!strings.Contains(got, deliveryMark(ev.ID)) {
				t.Fatalf("answer %d, limit %d: %d bytes, footer or mark missing:\n%s", n, limit, len(got), got)
			}
		}
	}
}
