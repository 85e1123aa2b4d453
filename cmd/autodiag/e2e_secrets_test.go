package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/internal/fake/awssecretsfake"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
)

// TestSecretsFromStoreRotatedWithoutRestart: an embedded agent reads its
// alert listener token (Secrets Manager), its webhook's HMAC key (SSM SecureString)
// and the model's key (Secrets Manager) from the secrets fake at start, and
// after the three are rotated and the agent gets SIGHUP, the alert listener wants
// the new token, the next webhook is signed with the new key and the next
// model request carries the new key — with no restart. No value reaches
// the log.
func TestSecretsFromStoreRotatedWithoutRestart(t *testing.T) {
	fake := awssecretsfake.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	env := []string{"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + srv.URL, "AWS_ENDPOINT_URL_SSM=" + srv.URL}

	tok1, tok2 := "intake-tok-"+randHex(t), "intake-tok-"+randHex(t)
	hmac1, hmac2 := "hmac-"+randHex(t), "hmac-"+randHex(t)
	key1, key2 := "sk-"+randHex(t), "sk-"+randHex(t)
	tokenARN := fake.PutSecretString("autodiag/intake-token", tok1)
	fake.PutParameter("/autodiag/webhook-hmac", hmac1, true)
	keyARN := fake.PutSecretString("autodiag/model-key", key1)

	model := openaifake.New()
	t.Cleanup(model.Close)
	hook := newHookReceiver(t, 0)
	yaml := fmt.Sprintf(`admin_addr: 127.0.0.1:0
diagnostics:
  - name: broken
    command: [/bin/false]
    timeout: 5s
intake:
  addr: 127.0.0.1:0
  auth: {bearer_token_secret: '%s'}
notify:
  - name: hook
    type: webhook
    url: '%s/hook'
    allow_http: true
    secret_secret: /autodiag/webhook-hmac
    timeout: 5s
    on: [failed]
report:
  enabled: true
  provider: openai
  model: e2e-model
  base_url: '%s'
  api_key_secret: '%s'
  limits: [{daily: 100}]
`, tokenARN, hook.srv.URL, model.BaseURL(), keyARN)
	a := startProc(t, yaml, env...)
	intake := listenerAddr(t, a)

	// runFailed runs the broken diagnostic on host and waits for its
	// webhook and its model request; it returns both.
	runFailed := func(host string, n int) (hookRequest, openaifake.Request) {
		t.Helper()
		if code, posted := a.post("/v1/tasks", fmt.Sprintf(`{"host":%q,"diagnostic":"broken"}`, host)); code != http.StatusAccepted {
			t.Fatalf("POST /v1/tasks: %d %v", code, posted)
		}
		eventually(t, 30*time.Second, "the failed event delivered", func() bool { return len(hook.of("failed")) == n })
		eventually(t, 30*time.Second, "the model asked", func() bool { return len(model.Requests()) == n })
		return hook.of("failed")[n-1], model.Requests()[n-1]
	}

	if code, body := postAlert(t, intake, "/v1/alerts/alertmanager", tok1, fixture(t, "alertmanager_v4.json")); code == http.StatusUnauthorized {
		t.Fatalf("alert listener with the token from the store: %d %s", code, body)
	}
	h, m := runFailed("web-1", 1)
	if !notify.Verify([]byte(hmac1), h.body, h.signature) {
		t.Error("first webhook not signed with the key from SSM")
	}
	if m.Authorization != "Bearer "+key1 {
		t.Errorf("first model request Authorization %q; want the key from Secrets Manager", m.Authorization)
	}

	fake.PutSecretString("autodiag/intake-token", tok2)
	fake.PutParameter("/autodiag/webhook-hmac", hmac2, true)
	fake.PutSecretString("autodiag/model-key", key2)
	a.signal(syscall.SIGHUP)
	a.awaitLogsWhere("msg", "secrets refreshed", "reason", "reload")
	if l := a.logsWhere("msg", "secrets refreshed"); l[0]["changed"] != float64(3) {
		t.Fatalf("refresh line %v; want changed=3", l[0])
	}

	if code, _ := postAlert(t, intake, "/v1/alerts/alertmanager", tok1, fixture(t, "alertmanager_v4.json")); code != http.StatusUnauthorized {
		t.Errorf("alert listener with the rotated-out token: %d; want 401", code)
	}
	if code, body := postAlert(t, intake, "/v1/alerts/alertmanager", tok2, fixture(t, "alertmanager_v4.json")); code == http.StatusUnauthorized {
		t.Errorf("alert listener with the rotated token: %d %s", code, body)
	}
	h, m = runFailed("web-2", 2)
	if !notify.Verify([]byte(hmac2), h.body, h.signature) {
		t.Error("webhook after the rotation not signed with the new key")
	}
	if m.Authorization != "Bearer "+key2 {
		t.Errorf("model request after the rotation: Authorization %q; want the new key", m.Authorization)
	}

	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	raw := a.Output()
	for _, v := range []string{tok1, tok2, hmac1, hmac2, key1, key2} {
		if strings.Contains(raw, v) {
			t.Errorf("the log holds a secret value %q", v)
		}
	}
}
