package config

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/alert"
)

func TestConfigAdminAddrBeyondLoopbackNeedsAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		want []string // substrings of the error; none = valid
	}{
		{name: "wildcard without auth", yaml: "workers: 2\nadmin_addr: 0.0.0.0:9464\n",
			want: []string{`admin_addr (line 2): "0.0.0.0:9464" is reachable from other hosts: set admin_auth`, "or listen on loopback"}},
		{name: "empty host without auth", yaml: "admin_addr: ':9464'\n",
			want: []string{`admin_addr (line 1): ":9464" is reachable`}},
		{name: "host address without auth", yaml: "admin_addr: 10.0.0.5:9464\n",
			want: []string{`admin_addr (line 1): "10.0.0.5:9464" is reachable`}},
		{name: "from the environment without auth", env: map[string]string{"AUTODIAG_ADMIN_ADDR": "0.0.0.0:9464"},
			want: []string{`admin_addr: "0.0.0.0:9464" is reachable`, "(set by AUTODIAG_ADMIN_ADDR)"}},
		{name: "with bearer auth", yaml: "admin_addr: 0.0.0.0:9464\nadmin_auth:\n  bearer_token_env: ADMIN_TOKEN\n"},
		{name: "with basic auth", yaml: "admin_addr: 0.0.0.0:9464\nadmin_auth:\n  basic: {user: ops, password_env: ADMIN_PASSWORD}\n"},
		{name: "from the environment with auth", yaml: "admin_auth: {bearer_token_env: ADMIN_TOKEN}\n",
			env: map[string]string{"AUTODIAG_ADMIN_ADDR": "0.0.0.0:9464"}},
		{name: "loopback without auth", yaml: "admin_addr: 127.0.0.1:9464\n"},
		{name: "localhost without auth", yaml: "admin_addr: localhost:9464\n"},
		{name: "ipv6 loopback without auth", yaml: "admin_addr: '[::1]:9464'\n"},
		{name: "auth on loopback", yaml: "admin_auth: {bearer_token_env: ADMIN_TOKEN}\n"},
		{name: "auth names no variable", yaml: "admin_auth:\n  bearer_token_env: 'not a name'\n",
			want: []string{"admin_auth.bearer_token_env (line 2): must name an environment variable"}},
		{name: "auth both kinds", yaml: "admin_auth:\n  bearer_token_env: T\n  basic: {user: u, password_env: P}\n",
			want: []string{"admin_auth (line 1): set bearer_token_env or basic, not both"}},
		{name: "basic without user", yaml: "admin_auth:\n  basic: {password_env: P}\n",
			want: []string{"admin_auth.basic.user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			_, err := Load([]byte(tc.yaml), lookup)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Load accepted the file")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigAdminCredentials(t *testing.T) {
	env := map[string]string{"ADMIN_TOKEN": "s3cret", "ADMIN_PASSWORD": "pw", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		name    string
		auth    alert.AuthConfig
		want    alert.Credentials
		wantErr string
	}{
		{name: "none", auth: alert.AuthConfig{}},
		{name: "bearer", auth: alert.AuthConfig{BearerTokenEnv: "ADMIN_TOKEN"}, want: alert.Credentials{BearerToken: "s3cret"}},
		{name: "basic", auth: alert.AuthConfig{Basic: alert.BasicAuth{User: "ops", PasswordEnv: "ADMIN_PASSWORD"}},
			want: alert.Credentials{BasicUser: "ops", BasicPassword: "pw"}},
		{name: "bearer unset", auth: alert.AuthConfig{BearerTokenEnv: "MISSING"},
			wantErr: "admin_auth.bearer_token_env: environment variable MISSING is unset or empty"},
		{name: "bearer empty", auth: alert.AuthConfig{BearerTokenEnv: "EMPTY"},
			wantErr: "admin_auth.bearer_token_env: environment variable EMPTY is unset or empty"},
		{name: "password unset", auth: alert.AuthConfig{Basic: alert.BasicAuth{User: "ops", PasswordEnv: "MISSING"}},
			wantErr: "admin_auth.basic.password_env: environment variable MISSING is unset or empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.AdminAuth = tc.auth
			got, err := cfg.AdminCredentials(lookup)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("AdminCredentials error = %v, want %q", err, tc.wantErr)
				}
				if ps := Problems(err); len(ps) != 1 || ps[0].Key != strings.SplitN(tc.wantErr, ":", 2)[0] {
					t.Fatalf("not a *ConfigError naming the key: %#v", ps)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("AdminCredentials = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
