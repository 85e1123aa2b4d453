package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/internal/testenv"
)

// extraSecret is a value of redact.values_env: nothing in its shape says
// secret.
const extraSecret = "plain-Zk3/Qw9+Lp2Rt7Vx"

// corpusSample is one secret of agent/redact/testdata/secrets.tsv.
type corpusSample struct{ kind, secret, text string }

// loadCorpus returns both corpora's secrets and look-alikes, and how many
// of the look-alikes are the first corpus's (they come first).
func loadCorpus(t *testing.T) ([]corpusSample, []string, int) {
	t.Helper()
	f, err := os.Open("../../agent/redact/testdata/secrets.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var secrets []corpusSample
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "\t")
		if len(parts) != 3 || strings.HasPrefix(parts[0], "#") {
			continue
		}
		secret := strings.ReplaceAll(parts[1], `\n`, "\n")
		secrets = append(secrets, corpusSample{parts[0], secret, strings.Replace(parts[2], "{}", secret, 1)})
	}
	b, err := os.ReadFile("../../agent/redact/testdata/lookalikes.txt")
	if err != nil {
		t.Fatal(err)
	}
	var look []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			look = append(look, l)
		}
	}
	first := len(look)
	// The second corpus: gitleaks' own samples, judged by the redact
	// package's TestGitleaksCorpus (each tp with its secret, each fp that
	// must come out unchanged).
	g, err := os.ReadFile("../../agent/redact/testdata/gitleaks_judged.tsv")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(g), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || strings.HasPrefix(line, "#") {
			continue
		}
		var secret, text string
		if json.Unmarshal([]byte(f[2]), &secret) != nil || json.Unmarshal([]byte(f[3]), &text) != nil {
			t.Fatalf("gitleaks_judged.tsv: bad line %q", line)
		}
		if f[0] == "tp" {
			secrets = append(secrets, corpusSample{"gitleaks:" + f[1], secret, text})
		} else {
			look = append(look, text)
		}
	}
	return secrets, look, first
}

var markerRE = regexp.MustCompile(`\[REDACTED:[a-z0-9_]+\]`)

// corpusLeak is the first 10-byte piece of secret (per line) found in s
// that background does not hold; inS and inBG are pieces.in(s) and
// pieces.in(background) of the corpus's pieces.
func corpusLeak(inS, inBG map[string]bool, secret string) string {
	for _, line := range strings.Split(secret, "\n") {
		w := min(10, len(line))
		for i := 0; w > 0 && i+w <= len(line); i++ {
			if p := line[i : i+w]; inS[p] && !inBG[p] {
				return p
			}
		}
	}
	return ""
}

// leakPieces is every piece corpusLeak looks for (per secret line, each
// window of min(10, len(line)) bytes), by length. Finding them all in one
// pass over a sink replaces a strings.Contains over the whole sink per
// piece: tens of thousands of pieces times every sink and the background
// were ~6 CPU s of the race build, the test's largest cost of its own.
type leakPieces map[int]map[string]bool

func newLeakPieces(secrets []string) leakPieces {
	lp := leakPieces{}
	for _, secret := range secrets {
		for _, line := range strings.Split(secret, "\n") {
			w := min(10, len(line))
			for i := 0; w > 0 && i+w <= len(line); i++ {
				if lp[w] == nil {
					lp[w] = map[string]bool{}
				}
				lp[w][line[i:i+w]] = true
			}
		}
	}
	return lp
}

// in returns the pieces that occur in s.
func (lp leakPieces) in(s string) map[string]bool {
	found := map[string]bool{}
	for w, set := range lp {
		for i := 0; i+w <= len(s); i++ {
			if p := s[i : i+w]; set[p] {
				found[p] = true
			}
		}
	}
	return found
}

// Both secret corpora (the project's and gitleaks' own samples), printed
// by a failing diagnostic on stdout and stderr at the start, middle and
// end of lines and inside JSON, with the look-alikes and terminal escape
// sequences, reach no sink of a real agent: GET /v1/tasks/{id}, `autodiag
// show`, the JSON log, the webhook, the Slack sink, the S3 object, the
// prompt the model got, and the investigation's tool result (its task's
// record, the tool message, the stored report). The look-alikes reach the
// S3 object (and the first corpus's the record) unchanged, and show prints
// the escapes visibly.
func TestCorpusThroughEverySink(t *testing.T) {
	secrets, look, firstLook := loadCorpus(t)
	dir := t.TempDir()
	var stdout, stderr strings.Builder
	// The first corpus's look-alikes and the escapes come first, within
	// the record's cap (its head); gitleaks' look-alikes last, in the S3
	// object (the whole output).
	for _, l := range look[:firstLook] {
		fmt.Fprintf(&stdout, "%s\n", l)
	}
	stdout.WriteString("title \x1b]0;pwned\x07 clear \x1b[2J done\n")
	for i, s := range secrets {
		w := &stdout
		if i%2 == 1 {
			w = &stderr
		}
		switch i % 5 {
		case 0:
			fmt.Fprintf(w, "%s\n", s.text)
		case 1:
			fmt.Fprintf(w, "%s status=ok\n", s.text)
		case 2:
			fmt.Fprintf(w, "Dec  1 10:00:01 app[12]: loaded %s from environment\n", s.text)
		case 3:
			b, _ := json.Marshal(map[string]string{"line": s.text})
			fmt.Fprintf(w, "%s\n", b)
		case 4:
			fmt.Fprintf(w, "error: connect failed (%s)\n", s.text)
		}
	}
	for _, l := range look[firstLook:] {
		fmt.Fprintf(&stdout, "%s\n", l)
	}
	// Values with no secret's shape, known to the agent: its own model key
	// and a variable of redact.values_env, raw and in base64.
	fmt.Fprintf(&stdout, "model key in use: %s\nextra %s and %s\n", reportKey, extraSecret,
		base64.StdEncoding.EncodeToString([]byte("user:"+extraSecret)))
	outPath, errPath := filepath.Join(dir, "out.txt"), filepath.Join(dir, "err.txt")
	script := filepath.Join(dir, "corpus.sh")
	for p, c := range map[string]string{outPath: stdout.String(), errPath: stderr.String(),
		script: fmt.Sprintf("#!/bin/sh\ncat '%s'\ncat '%s' >&2\nexit 3\n", outPath, errPath)} {
		if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	const bucket = "corpus-results"
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(s3srv.Close)
	model := openaifake.New()
	t.Cleanup(model.Close)
	hook := newHookReceiver(t, 0)
	slack := newHookReceiver(t, 0) // Slack's body carries no event header: all() is its requests

	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	cfg := sqsAgentConfig{instance: "agent-corpus", workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}
	yaml := strings.Replace(cfg.yaml(), "limiter:\n", fmt.Sprintf("  - name: corpus\n    command: [/bin/sh, '%s', '{host}']\n    runs_on: any\n    timeout: 10s\n"+
		"    max_output: 1MiB\n    investigate: true\n    description: prints the corpus\nlimiter:\n", script), 1) +
		fmt.Sprintf("results:\n  s3:\n    bucket: %s\n    path_style: true\n", bucket) +
		fmt.Sprintf("notify:\n  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n    on: [failed]\n"+
			"  - name: slack\n    type: slack\n    url_env: E2E_SLACK_URL\n    allow_http: true\n    on: [failed]\n", hook.srv.URL) +
		fmt.Sprintf("report:\n  enabled: true\n  provider: openai\n  model: e2e-model\n  base_url: '%s'\n  api_key_env: %s\n"+
			"  limits:\n    - daily: 100\n  investigate: {max_steps: 2, daily_tokens: 1000000}\n", model.BaseURL(), reportKeyEnv) +
		"redact:\n  values_env: [E2E_EXTRA_SECRET]\n"
	// The model asks for the corpus diagnostic as a tool: its result (the
	// investigation task's record and the tool message of the second
	// request) is a sink too.
	model.Queue(openaifake.Reply{ToolCalls: []openaifake.ToolCall{{ID: "call_corpus", Name: "corpus", Arguments: `{}`}}})
	env := append([]string{reportKeyEnv + "=" + reportKey, "E2E_EXTRA_SECRET=" + extraSecret, "AWS_ENDPOINT_URL_S3=" + s3srv.URL,
		"E2E_SLACK_URL=" + slack.srv.URL + "/services/T000/B000/e2e"}, fq.env...)
	a := startProc(t, yaml, env...)

	fq.send(t, `{"id":"corpus-1","host":"web-1","diagnostic":"corpus","alert":{"source":"generic","name":"leak ghp_Zq8Lr2Wm5Xn7Pk3Vt9Hs4Jd6Fb1Gc0Ny2Ma8"}}`)
	var report rootcause.Result
	eventually(t, 60*time.Second, "the webhook, Slack, the model and the investigation's report reached", func() bool {
		var ok bool
		report, ok = recordReport(t, rc, prefix, "corpus-1")
		return ok && len(hook.of("failed")) >= 1 && len(slack.all()) >= 1 && len(model.Requests()) >= 2
	})
	rec, ok := sqsTaskRecord(t, rc, prefix, "corpus-1")
	if !ok || rec.Outcome != "failed" {
		t.Fatalf("record %+v, want failed", rec)
	}
	inv := report.Investigation
	if inv == nil || len(inv.Steps) == 0 || len(inv.Steps[0].Calls) != 1 || inv.Steps[0].Calls[0].Result != "ran" {
		t.Fatalf("investigation %+v, want the corpus diagnostic run as a tool", inv)
	}
	toolTask := inv.Steps[0].Calls[0].TaskID

	var hooks, slacks strings.Builder
	for _, h := range hook.of("failed") {
		hooks.Write(h.body)
	}
	for _, h := range slack.all() {
		slacks.Write(h.body)
	}
	sinks := map[string]string{
		"webhook":                      hooks.String(),
		"slack":                        slacks.String(),
		"prompt":                       string(model.Requests()[0].Body),
		"investigation tool result":    string(model.Requests()[1].Body),
		"report in the record (Redis)": fmt.Sprintf("%+v", report),
	}
	if tr, ok := sqsTaskRecord(t, rc, prefix, toolTask); !ok || !strings.Contains(string(model.Requests()[1].Body), `"role":"tool"`) {
		t.Fatalf("the tool call's record %+v (found %v), or no tool message", tr, ok)
	} else {
		sinks["investigation task record"] = tr.Output
	}
	// The tool's sinks carry the corpus (redacted), not just its name.
	for _, name := range []string{"investigation tool result", "investigation task record"} {
		if !strings.Contains(sinks[name], "[REDACTED:") {
			t.Errorf("%s holds no redacted output: %.300q", name, sinks[name])
		}
	}
	resp, err := a.get("/v1/tasks/corpus-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sinks["GET /v1/tasks/{id}"] = string(body)
	var view struct {
		Output    string `json:"output"`
		OutputURL string `json:"output_url"`
	}
	if err := json.Unmarshal(body, &view); err != nil {
		t.Fatal(err)
	}
	cfgPath := sqsWriteConfig(t, yaml)
	code, shown, stderrOut := runCLI(t, nil, "show", "corpus-1", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderrOut)
	}
	sinks["autodiag show"] = shown
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(s3srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")})
	key := strings.TrimPrefix(view.OutputURL, "s3://"+bucket+"/")
	obj, err := s3c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", view.OutputURL, err)
	}
	object, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	sinks["S3 object"] = string(object)
	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Errorf("exit %d after the drain, want 0", code)
	}
	sinks["JSON log"] = a.Output()

	unescape := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&", `\/`, "/", `\"`, `"`, `\\`, `\`)
	// A secret leaks when a piece of it that nothing else printed (no
	// look-alike, no other sample's context: gitleaks' samples share
	// prefixes such as "postgres://app:" and "-----BEGIN") reaches a sink.
	var bg strings.Builder
	for _, l := range look {
		bg.WriteString(l + "\x00")
	}
	for _, sm := range secrets {
		bg.WriteString(strings.ReplaceAll(sm.text, sm.secret, "\x00") + "\x00")
	}
	pieces := make([]string, len(secrets))
	for i, sm := range secrets {
		pieces[i] = sm.secret
	}
	lp := newLeakPieces(pieces)
	inBG := lp.in(bg.String())
	misses := 0
	for name, s := range sinks {
		all := s + "\n" + unescape.Replace(s)
		// Markers name rules (github_pat): not a leak.
		all = markerRE.ReplaceAllString(all, "")
		inAll := lp.in(all)
		for _, sm := range secrets {
			if l := corpusLeak(inAll, inBG, sm.secret); l != "" {
				misses++
				i := strings.Index(all, l)
				t.Errorf("%s leaks %s: %q in %q", name, sm.kind, l, all[max(0, i-80):min(len(all), i+80)])
			}
		}
		if strings.Contains(all, "ghp_Zq8Lr2Wm5Xn7") {
			t.Errorf("%s leaks the alert name's token", name)
		}
		if strings.Contains(all, reportKey) || strings.Contains(all, "Qw9+Lp2R") {
			t.Errorf("%s leaks a known value (the model key or redact.values_env)", name)
		}
	}
	if dump := os.Getenv("AUTODIAG_CORPUS_DUMP"); dump != "" {
		_ = os.WriteFile(dump, []byte(view.Output), 0o600)
	}
	// Look-alikes reach the record (those within its cap) and the S3
	// object unchanged.
	fps := 0
	for i, l := range look {
		if i < firstLook && !strings.Contains(view.Output, l+"\n") {
			fps++
			t.Errorf("look-alike changed in the record: %q", l)
		}
		if !strings.Contains(string(object), l+"\n") {
			fps++
			t.Errorf("look-alike changed in the S3 object: %q", l)
		}
	}
	if strings.Contains(shown, "\x1b") || !strings.Contains(shown, `\x1b]0;pwned\x07`) {
		t.Errorf("show printed the escape sequences raw or not at all")
	}
	t.Logf("CORPUS %d samples, %d look-alikes through %d sinks: %d misses, %d false positives",
		len(secrets), len(look), len(sinks), misses, fps)
}

func (h *hookReceiver) all() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.reqs...)
}

// corpusLeak finds the first piece of a secret that a sink holds and the
// background does not, a short line whole, and nothing in a clean sink.
func TestCorpusLeak(t *testing.T) {
	secrets := []string{"abcdefghijklmnop", "key\nshort"}
	lp := newLeakPieces(secrets)
	bg := lp.in("...bcdefghijk...")
	for _, c := range []struct{ sink, secret, want string }{
		{"log: zcdefghijklmz", secrets[0], "cdefghijkl"},
		{"log: abcdefghijk", secrets[0], "abcdefghij"},
		{"log: bcdefghijk only", secrets[0], ""}, // the background's
		{"log: [REDACTED:x] short", secrets[1], "short"},
		{"log: clean", secrets[1], ""},
	} {
		if got := corpusLeak(lp.in(c.sink), bg, c.secret); got != c.want {
			t.Errorf("corpusLeak(%q, %q) = %q, want %q", c.sink, c.secret, got, c.want)
		}
	}
}
