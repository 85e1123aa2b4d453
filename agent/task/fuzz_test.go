package task

import (
	"strings"
	"testing"
	"time"
)

// FuzzDecodeValidate: whatever the body, decoding and validation never
// panic, every failure carries a reason, and an accepted task has a host
// that is lower-case ASCII hostname syntax and parameters that are free of
// shell metacharacters the catalog pattern excludes.
//
//	go test ./agent/task -run '^$' -fuzz FuzzDecodeValidate -fuzztime 30s
func FuzzDecodeValidate(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt-8812","host":"web-01.prod.example.com","diagnostic":"disk-usage","params":{"mount":"/var"},"severity":"high","alert":{"source":"zabbix","name":"Disk /var 95%","event_id":"8812"},"created_at":"2026-08-11T10:00:00Z"}`,
		`{"host":"WEB-01.PROD.EXAMPLE.COM.","diagnostic":"uptime"}`,
		`{"host":"web;reboot","diagnostic":"uptime"}`,
		`{"host":"$(id).example.com","diagnostic":"uptime"}`,
		`{"host":"web-01.prod.example.com","diagnostic":"disk-usage","params":{"mount":"/var; rm -rf /"}}`,
		`{"host":"web-01.prod.example.com","diagnostic":"disk-usage","params":{"mount":"-rf"}}`,
		`{"host":"ex\u0430mple.example.com","diagnostic":"uptime"}`,
		`{"host":"a","diagnostic":"b","x":1}`,
		`not json`,
		`{}`,
		`{"host":"` + strings.Repeat("a.", 150) + `example.com","diagnostic":"uptime"}`,
	} {
		f.Add([]byte(seed))
	}
	v := testValidator(f)
	now := time.Date(2026, 8, 11, 10, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		tk, err := Decode(body)
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("decode error without reason: %v", err)
			}
			return
		}
		if err := v.Validate(&tk, now); err != nil {
			if Reason(err) == "" {
				t.Fatalf("validate error without reason: %v", err)
			}
			return
		}
		if len(tk.Host) > MaxHostLen || strings.ContainsAny(tk.Host, " ;$`()|&<>\\\n\t'\"") || strings.ToLower(tk.Host) != tk.Host {
			t.Fatalf("accepted host %q", tk.Host)
		}
		if again, err := NormalizeHost(tk.Host); err != nil || again != tk.Host {
			t.Fatalf("normalisation not idempotent: %q -> %q, %v", tk.Host, again, err)
		}
		for k, val := range tk.Params {
			if strings.ContainsAny(val, ";$`|&\n ") || strings.HasPrefix(val, "-") {
				t.Fatalf("accepted param %s=%q", k, val)
			}
		}
	})
}
