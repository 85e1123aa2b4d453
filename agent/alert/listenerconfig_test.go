package alert

import (
	"errors"
	"slices"
	"testing"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/internal/configerr"
)

func TestListenerConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    ListenerConfig
		keys []string
	}{
		{"off", ListenerConfig{}, nil},
		{"loopback without auth", ListenerConfig{Addr: "127.0.0.1:9465"}, nil},
		{"localhost without auth", ListenerConfig{Addr: "localhost:9465"}, nil},
		{"ipv6 loopback without auth", ListenerConfig{Addr: "[::1]:9465"}, nil},
		{"all interfaces without auth", ListenerConfig{Addr: "0.0.0.0:9465"}, []string{"auth"}},
		{"empty host without auth", ListenerConfig{Addr: ":9465"}, []string{"auth"}},
		{"name without auth", ListenerConfig{Addr: "intake.example.com:9465"}, []string{"auth"}},
		{"bearer", ListenerConfig{Addr: "0.0.0.0:9465", Auth: AuthConfig{BearerTokenEnv: "AUTODIAG_INTAKE_TOKEN"}, MaxBody: 1 << 20}, nil},
		{"basic", ListenerConfig{Addr: "0.0.0.0:9465", Auth: AuthConfig{Basic: BasicAuth{User: "zabbix", PasswordEnv: "ZBX_PW"}}}, nil},
		{"both", ListenerConfig{Addr: "0.0.0.0:9465", Auth: AuthConfig{BearerTokenEnv: "T", Basic: BasicAuth{User: "u", PasswordEnv: "P"}}}, []string{"auth"}},
		{"basic without password", ListenerConfig{Addr: "0.0.0.0:9465", Auth: AuthConfig{Basic: BasicAuth{User: "u"}}}, []string{"auth.basic.password_env"}},
		{"bad env name", ListenerConfig{Addr: "0.0.0.0:9465", Auth: AuthConfig{BearerTokenEnv: "my token"}}, []string{"auth.bearer_token_env"}},
		{"tls half", ListenerConfig{Addr: "127.0.0.1:9465", TLS: TLSConfig{CertFile: "c.pem"}}, []string{"tls"}},
		{"max body", ListenerConfig{MaxBody: runner.Size(MaxBody + 1)}, []string{"max_body"}},
		{"bad addr", ListenerConfig{Addr: "9465"}, []string{"addr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			for _, e := range flatten(tc.c.Validate()) {
				if e == nil {
					continue
				}
				var ce *configerr.Error
				ok := errors.As(e, &ce)
				if !ok {
					t.Fatalf("%T %v", e, e)
				}
				keys = append(keys, ce.Key)
			}
			if !slices.Equal(keys, tc.keys) {
				t.Fatalf("keys %v, want %v", keys, tc.keys)
			}
		})
	}
}

func TestListenerConfigCredentials(t *testing.T) {
	env := map[string]string{"TOK": "t0k", "PW": "pw", "EMPTY": ""}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := ListenerConfig{Auth: AuthConfig{BearerTokenEnv: "TOK"}}
	if cr, err := c.Credentials(getenv); err != nil || cr.BearerToken != "t0k" {
		t.Fatalf("%+v %v", cr, err)
	}
	c = ListenerConfig{Auth: AuthConfig{Basic: BasicAuth{User: "u", PasswordEnv: "PW"}}}
	if cr, err := c.Credentials(getenv); err != nil || cr.BasicUser != "u" || cr.BasicPassword != "pw" {
		t.Fatalf("%+v %v", cr, err)
	}
	for _, name := range []string{"EMPTY", "UNSET"} {
		c = ListenerConfig{Auth: AuthConfig{BearerTokenEnv: name}}
		if _, err := c.Credentials(getenv); err == nil {
			t.Fatalf("%s: no error", name)
		}
	}
}

// TestServerTimeouts: every phase is bounded, and a send fits inside the
// write timeout so its answer can still be written.
func TestServerTimeouts(t *testing.T) {
	s := NewServer(ListenerConfig{Addr: "127.0.0.1:0"}, nil)
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("unbounded server: %+v", s)
	}
	if DefaultSendTimeout >= s.WriteTimeout {
		t.Fatalf("send timeout %s does not fit in the write timeout %s", DefaultSendTimeout, s.WriteTimeout)
	}
	if s.ReadHeaderTimeout > s.ReadTimeout {
		t.Fatal("read header timeout exceeds the read timeout")
	}
}
