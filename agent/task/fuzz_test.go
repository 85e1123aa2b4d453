package task

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeValidate: whatever the body, decoding and validation never
// panic, every failure carries a reason, and an accepted task has a host
// that is lower-case ASCII hostname syntax and parameters that are free of
// shell metacharacters the catalog pattern excludes. A body Decode accepts
// has no duplicate or case-variant member names (checked with a different
// tokenizer); a host any validator accepts is never one a resolver reads as
// this instance or its metadata service (checked with inet_aton's rules),
// and without AllowIPLiterals never an address at all.
//
//	go test ./agent/task -run '^$' -fuzz FuzzDecodeValidate -fuzztime 60s
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
		// Duplicate and case-variant names.
		`{"host":"ok.example.com","HOST":"169.254.169.254","diagnostic":"uptime"}`,
		`{"Host":"ok.example.com","diagnostic":"uptime"}`,
		`{"ho\u017ft":"169.254.169.254","diagnostic":"uptime"}`,
		`{"host":"ok.example.com","host":"169.254.169.254","diagnostic":"uptime"}`,
		`{"host":"ok.example.com","h\u006fst":"169.254.169.254","diagnostic":"uptime"}`,
		`{"host":"ok.example.com","diagnostic":"uptime","Diagnostic":"disk-usage"}`,
		`{"host":"ok.example.com","diagnostic":"disk-usage","params":{"mount":"/var","mount":"/"}}`,
		`{"host":"ok.example.com","diagnostic":"uptime","alert":{"event_id":"1","EVENT_ID":"2"}}`,
		// Hosts that reach this instance or its metadata service.
		`{"host":"169.254.169.254","diagnostic":"uptime"}`,
		`{"host":"2852039166","diagnostic":"uptime"}`,
		`{"host":"0xa9fea9fe","diagnostic":"uptime"}`,
		`{"host":"0251.0376.0251.0376","diagnostic":"uptime"}`,
		`{"host":"127.1","diagnostic":"uptime"}`,
		`{"host":"0","diagnostic":"uptime"}`,
		`{"host":"localhost","diagnostic":"uptime"}`,
		`{"host":"fd00:ec2::254","diagnostic":"uptime"}`,
		`{"host":"10.0.0.1","diagnostic":"uptime"}`,
		`{"host":"web.example.com","diagnostic":"uptime","created_at":"9999-01-01T00:00:00Z"}`,
	} {
		f.Add([]byte(seed))
	}
	v := testValidator(f)
	anyName := []*regexp.Regexp{regexp.MustCompile(`.`)}
	strict := &Validator{Allow: anyName, Catalog: v.Catalog}
	optIn := &Validator{Allow: anyName, Catalog: v.Catalog, AllowIPLiterals: true}
	now := time.Date(2026, 8, 11, 10, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		tk, err := Decode(body)
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("decode error without reason: %v", err)
			}
			return
		}
		if err := checkNames(json.NewDecoder(strings.NewReader(string(body))), ""); err != nil {
			t.Fatalf("decoded a body the exact-name rules reject: %v", err)
		}
		for _, val := range []*Validator{strict, optIn} {
			tk := tk
			if err := val.Validate(&tk, now); err != nil {
				if Reason(err) == "" {
					t.Fatalf("validate error without reason: %v", err)
				}
				continue
			}
			if why := targetOracle(tk.Host, val.AllowIPLiterals); why != "" {
				t.Fatalf("accepted host %q (allow_ip_literals=%v): %s", tk.Host, val.AllowIPLiterals, why)
			}
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
		if tk.CreatedAt.After(now.Add(MaxFutureSkew)) {
			t.Fatalf("accepted created_at %s", tk.CreatedAt)
		}
		for k, val := range tk.Params {
			if strings.ContainsAny(val, ";$`|&\n ") || strings.HasPrefix(val, "-") {
				t.Fatalf("accepted param %s=%q", k, val)
			}
		}
	})
}

// memberNames are the exact names of each object of a task, by path.
var memberNames = map[string]string{
	"":       " id host diagnostic params severity alert created_at ",
	"/alert": " source name event_id ",
}

// checkNames reads one JSON value with encoding/json's tokenizer and
// reports a name given twice in one object, or a name a task does not
// have, compared byte for byte after unescaping.
func checkNames(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		elem := path + "[]"
		if d == '{' {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k := kt.(string)
			if seen[k] {
				return fmt.Errorf("%s: %q given twice", path, k)
			}
			seen[k] = true
			if names, ok := memberNames[path]; ok && !strings.Contains(names, " "+k+" ") {
				return fmt.Errorf("%s: %q is not a member name", path, k)
			}
			elem = path + "/" + k
		}
		if err := checkNames(dec, elem); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// targetOracle says why a resolver could take host for a forbidden
// target, or for an address when IP literals are off, or "" if it cannot.
// It reads numbers as inet_aton does, independently of NormalizeHost.
func targetOracle(host string, allowIPLiterals bool) string {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || strings.Contains(host, ":") {
		return "names this host or is an IPv6 literal"
	}
	switch host {
	case "instance-data", "instance-data.ec2.internal", "metadata", "metadata.google.internal":
		return "names the metadata service"
	}
	a, ok := inetAton(host)
	if !ok {
		return ""
	}
	if !allowIPLiterals {
		return "is an address " + a.String()
	}
	b := a.As4()
	switch {
	case b[0] == 127, b[0] == 0, b[0] == 169 && b[1] == 254:
		return "reaches this instance or its metadata service as " + a.String()
	case host != a.String():
		return "is a non-canonical spelling of " + a.String()
	}
	return ""
}

// inetAton parses s the way glibc's inet_aton does: one to four parts,
// each decimal, octal (leading 0) or hexadecimal (0x), the last part
// filling the remaining bytes.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals []uint64
	for _, p := range parts {
		base, digits := 10, p
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		n, err := strconv.ParseUint(digits, base, 32)
		if err != nil || digits == "" || digits[0] == '+' {
			return netip.Addr{}, false
		}
		vals = append(vals, n)
	}
	var ip uint64
	for i, n := range vals[:len(vals)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
		ip |= n << (24 - 8*i)
	}
	last := vals[len(vals)-1]
	if last >= 1<<(32-8*(len(vals)-1)) {
		return netip.Addr{}, false
	}
	ip |= last
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

func TestInetAton(t *testing.T) {
	for in, want := range map[string]string{
		"169.254.169.254":     "169.254.169.254",
		"2852039166":          "169.254.169.254",
		"0xa9fea9fe":          "169.254.169.254",
		"0251.0376.0251.0376": "169.254.169.254",
		"169.254.43518":       "169.254.169.254",
		"127.1":               "127.0.0.1",
		"0":                   "0.0.0.0",
		"0x":                  "0.0.0.0",
		"256.0.0.1":           "",
		"1.2.3.4.5":           "",
		"web.example.com":     "",
		"08.0.0.1":            "",
		"":                    "",
	} {
		a, ok := inetAton(in)
		if got := map[bool]string{true: a.String(), false: ""}[ok]; got != want {
			t.Errorf("inetAton(%q) = %q, want %q", in, got, want)
		}
	}
}
