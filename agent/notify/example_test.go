package notify_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
)

// A receiver checks X-Autodiag-Signature over the raw body before it
// decodes anything, and dedupes on X-Autodiag-Delivery.
func ExampleVerify() {
	key := []byte("the value of AUTODIAG_WEBHOOK_SECRET")
	seen := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || !notify.Verify(key, body, r.Header.Get("X-Autodiag-Signature")) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get("X-Autodiag-Delivery")
		if !seen[id] { // a retry of a delivery already handled is acknowledged, not redone
			seen[id] = true
			fmt.Println("event", r.Header.Get("X-Autodiag-Event"), "delivery", id)
		}
		w.WriteHeader(http.StatusNoContent)
	})

	body := []byte(`{"event":"failed","delivery_id":"d-1"}`)
	for range 2 { // the same delivery, twice
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/autodiag", nil)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.Header.Set("X-Autodiag-Event", "failed")
		req.Header.Set("X-Autodiag-Delivery", "d-1")
		req.Header.Set("X-Autodiag-Signature", notify.Sign(key, body))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Fprintln(os.Stdout, rec.Code)
	}
	// Output:
	// event failed delivery d-1
	// 204
	// 204
}

// A receiver checks X-Autodiag-Signature-V1 over the raw body and refuses
// a delivery signed more than five minutes ago: a captured request
// replayed later is turned away.
func ExampleVerifyV1() {
	key := []byte("the value of AUTODIAG_WEBHOOK_SECRET")
	body := []byte(`{"event":"failed","delivery_id":"d-1"}`)
	sent := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	header := notify.SignV1(key, body, sent)
	fmt.Println(header[:13])
	for _, at := range []time.Duration{30 * time.Second, time.Hour} {
		err := notify.VerifyV1(key, body, header, sent.Add(at), 5*time.Minute)
		fmt.Println(at, err)
	}
	fmt.Println(notify.VerifyV1(key, []byte(`{"event":"succeeded"}`), header, sent, 0))
	// Output:
	// t=1796040000,
	// 30s <nil>
	// 1h0m0s notify: signature time outside the tolerance (a replay, or a clock far off)
	// notify: signature does not match
}
