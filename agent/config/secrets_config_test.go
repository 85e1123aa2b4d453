package config

import (
	"slices"
	"strings"
	"testing"
)

const (
	smARN  = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/tok-AbCdEf"
	ssmARN = "arn:aws:ssm:eu-west-1:123456789012:parameter/autodiag/hmac"
)

// TestConfigSecretKeys: every *_secret key is accepted beside its *_env
// sibling's place, exclusive with it, checked for its shape, and listed by
// SecretRefs (which the agent reads at start and refreshes).
func TestConfigSecretKeys(t *testing.T) {
	valid := "admin_addr: 0.0.0.0:9464\nadmin_auth: {bearer_token_secret: '" + smARN + "'}\n" +
		"intake:\n  addr: 0.0.0.0:9000\n  auth: {basic: {user: am, password_secret: /autodiag/intake-pw}}\n" +
		"notify:\n  - {name: hook, type: webhook, url_secret: '" + smARN + "', secret_secret: '" + ssmARN + "', on: [failed]}\n" +
		"  - {name: chat, type: slack, url_secret: /autodiag/slack-url, on: [failed]}\n" +
		"report: {enabled: true, provider: openai, model: m, base_url: 'http://127.0.0.1:1/v1', api_key_secret: /autodiag/model-key}\n" +
		"secrets_refresh: 5m\n"
	cfg, err := Load([]byte(valid), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := []string{smARN, "/autodiag/intake-pw", smARN, ssmARN, "/autodiag/slack-url", "/autodiag/model-key"}
	if got := cfg.SecretRefs(); !slices.Equal(got, want) {
		t.Errorf("SecretRefs = %v; want %v", got, want)
	}

	for _, tc := range []struct{ name, yaml, want string }{
		{"token env and secret", "admin_auth: {bearer_token_env: T, bearer_token_secret: /a/b}\n",
			"admin_auth.bearer_token_secret (line 1): set bearer_token_env or bearer_token_secret, not both"},
		{"token secret not a reference", "intake:\n  auth: {bearer_token_secret: 'autodiag/tok'}\n",
			"intake.auth.bearer_token_secret"},
		{"password env and secret", "admin_auth:\n  basic: {user: u, password_env: P, password_secret: /a/b}\n",
			"admin_auth.basic.password_secret"},
		{"token secret and basic", "admin_auth:\n  bearer_token_secret: /a/b\n  basic: {user: u, password_env: P}\n",
			"set bearer_token_secret or basic, not both"},
		{"url and url_secret", "notify:\n  - {name: h, type: webhook, url: 'https://h.example/x', url_secret: /a/b, on: [failed]}\n",
			"notify[0].url_secret (line 2): url, url_env and url_secret are exclusive"},
		{"url_secret not a reference", "notify:\n  - {name: h, type: webhook, url_secret: 'https://h.example/x', on: [failed]}\n",
			"notify[0].url_secret"},
		{"secret_env and secret_secret", "notify:\n  - {name: h, type: webhook, url_env: U, secret_env: S, secret_secret: /a/b, on: [failed]}\n",
			"notify[0].secret_secret (line 2): secret_env and secret_secret are exclusive"},
		{"slack signed", "notify:\n  - {name: h, type: slack, url_env: U, secret_secret: /a/b, on: [failed]}\n",
			"notify[0].secret_secret (line 2): Slack incoming webhooks do not check signatures"},
		{"api key env and secret", "report: {provider: openai, api_key_env: K, api_key_secret: /a/b}\n",
			"report.api_key_secret (line 1): set api_key_env or api_key_secret, not both"},
		{"api key secret for bedrock", "report: {provider: bedrock, api_key_secret: /a/b}\n",
			"report.api_key_secret (line 1): is for provider"},
		{"refresh too short", "secrets_refresh: 10s\n", "secrets_refresh (line 1): 10s: must be between 1m0s and 24h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error %v; want it to say %q", err, tc.want)
			}
		})
	}
}
