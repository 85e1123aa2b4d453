package notify

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestSinkSecretsReadAtEachSend: a webhook whose URL and HMAC key come
// from *_secret references reads them again at each send, so a rotated
// value applies without rebuilding the sink; a rotated URL that is not a
// valid one, or a value gone missing, falls back to the value read at start;
// the error of a missing secret at start names the reference, never a value.
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
	if p, sig := send(); p != "/one" || sig != Sign([]byte("key-1"), body) {
		t.Fatalf("send with an invalid URL and an empty key went to %s signed %s; want the start values", p, sig)
	}

	_, err = NewSinks(cfg, func(string) (string, bool) { return "", false }, nil)
	if err == nil || !strings.Contains(err.Error(), "secret "+urlRef) {
		t.Fatalf("NewSinks without the URL secret = %v; want an error naming %s", err, urlRef)
	}
}
