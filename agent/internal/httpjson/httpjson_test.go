package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWrite: the status, the content type and the indented body.
func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, http.StatusTeapot, map[string]string{"status": "ok"})
	if rec.Code != http.StatusTeapot || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("code %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if got, want := rec.Body.String(), "{\n  \"status\": \"ok\"\n}\n"; got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
}
