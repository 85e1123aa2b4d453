package alert

import (
	"net/http/httptest"
	"testing"
)

// TestAuthLive: the credentials in force follow the secret's current
// value, and fall back to those read at start when it cannot be read (so a
// listener never opens because a value went missing).
func TestAuthLive(t *testing.T) {
	const ref = "/autodiag/intake-token"
	vals := map[string]string{ref: "tok-1"}
	getenv := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	a := AuthConfig{BearerTokenSecret: ref}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	initial, err := a.Credentials(getenv)
	if err != nil || initial.BearerToken != "tok-1" {
		t.Fatalf("Credentials = %+v, %v", initial, err)
	}
	live := a.Live(getenv, initial)
	req := func(tok string) bool {
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return live().Authorized(r)
	}
	if !req("tok-1") || req("tok-2") {
		t.Fatal("before rotation: want tok-1 only")
	}
	vals[ref] = "tok-2"
	if req("tok-1") || !req("tok-2") {
		t.Fatal("after rotation: want tok-2 only")
	}
	delete(vals, ref)
	if got := live(); got.BearerToken != "tok-1" || !got.Required() {
		t.Fatalf("with the secret unreadable: %+v; want the start credentials, still required", got)
	}
	if _, err := a.Credentials(getenv); err == nil || err.Error() == "" {
		t.Fatal("Credentials with the secret unreadable: want an error naming it")
	}
}
