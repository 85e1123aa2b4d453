package agent

import (
	"net/http"
	"testing"
)

// TestForgedInvestigationOriginRejected: a task sender that claims origin
// investigation with made-up parent ids (which would pick the
// investigation's limiter rule and skip the report) is answered 400
// invalid_origin, as is one with a token it made itself.
func TestForgedInvestigationOriginRejected(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	for _, body := range []string{
		`{"host":"a.example.com","diagnostic":"echo","origin":"investigation","parent":"made-up","investigation":"inv-x","step":1}`,
		`{"host":"a.example.com","diagnostic":"echo","origin":"investigation","parent":"made-up","investigation":"inv-x","step":1,"origin_token":"v1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`,
	} {
		code, out := ta.post(t, body)
		if code != http.StatusBadRequest || out["reason"] != "invalid_origin" {
			t.Errorf("POST %s = %d %v; want 400 invalid_origin", body, code, out)
		}
	}
	if code, out := ta.post(t, `{"host":"a.example.com","diagnostic":"echo"}`); code != http.StatusAccepted {
		t.Errorf("an ordinary task = %d %v; want 202", code, out)
	}
}
