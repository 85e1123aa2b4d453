package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A redacting logger redacts the message, strings, errors, groups and With:
// a rejected alert's detail quotes its values.
func TestLogger(t *testing.T) {
	red, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	log := Logger(slog.New(slog.NewJSONHandler(&b, nil)), red).With("ctx", "DB_PASSWORD=hunter22")
	log.Warn("alert rejected", "detail", `param url: "redis://:Hunter2Hunter2@cache" does not match`,
		"err", errors.New("token ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"), "n", 3,
		slog.Group("alert", "name", "leak xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"))
	out := b.String()
	for _, secret := range []string{"hunter22", "Hunter2Hunter2", "ghp_Q1w2", "xoxb-1234"} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds %q: %s", secret, out)
		}
	}
	if !strings.Contains(out, `"n":3`) || !strings.Contains(out, "[REDACTED:") {
		t.Errorf("log line %s", out)
	}
}
