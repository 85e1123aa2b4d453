package main

import (
	"bufio"
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

	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/internal/testenv"
)

// corpusSample is one secret of agent/redact/testdata/secrets.tsv.
type corpusSample struct{ kind, secret, text string }

func loadCorpus(t *testing.T) ([]corpusSample, []string) {
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
	return secrets, look
}

var markerRE = regexp.MustCompile(`\[REDACTED:[a-z0-9_]+\]`)

// corpusLeak is the first 10-byte piece of secret (per line) found in s.
func corpusLeak(s, secret string) string {
	for _, line := range strings.Split(secret, "\n") {
		w := min(10, len(line))
		for i := 0; w > 0 && i+w <= len(line); i++ {
			if strings.Contains(s, line[i:i+w]) {
				return line[i : i+w]
			}
		}
	}
	return ""
}

// The whole secret corpus, printed by a failing diagnostic on stdout and
// stderr at the start, middle and end of lines and inside JSON, with the
// look-alikes and terminal escape sequences, reaches no sink of a real
// agent: GET /v1/tasks/{id}, `autodiag show`, the JSON log, the webhook,
// the Slack sink, the S3 object and the prompt the model got. The
// look-alikes reach the record unchanged, and show prints the escapes
// visibly.
func TestCorpusThroughEverySink(t *testing.T) {
	secrets, look := loadCorpus(t)
	dir := t.TempDir()
	var stdout, stderr strings.Builder
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
	for _, l := range look {
		fmt.Fprintf(&stdout, "%s\n", l)
	}
	stdout.WriteString("title \x1b]0;pwned\x07 clear \x1b[2J done\n")
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
		"    max_output: 1MiB\nlimiter:\n", script), 1) +
		fmt.Sprintf("results:\n  s3:\n    bucket: %s\n    path_style: true\n", bucket) +
		fmt.Sprintf("notify:\n  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n    on: [failed]\n"+
			"  - name: slack\n    type: slack\n    url_env: E2E_SLACK_URL\n    allow_http: true\n    on: [failed]\n", hook.srv.URL) +
		fmt.Sprintf("report:\n  enabled: true\n  provider: openai\n  model: e2e-model\n  base_url: '%s'\n  api_key_env: %s\n"+
			"  limits:\n    - daily: 100\n", model.BaseURL(), reportKeyEnv)
	env := append([]string{reportKeyEnv + "=" + reportKey, "AWS_ENDPOINT_URL_S3=" + s3srv.URL,
		"E2E_SLACK_URL=" + slack.srv.URL + "/services/T000/B000/e2e"}, fq.env...)
	a := startProc(t, yaml, env...)

	fq.send(t, `{"id":"corpus-1","host":"web-1","diagnostic":"corpus","alert":{"source":"generic","name":"leak ghp_Zq8Lr2Wm5Xn7Pk3Vt9Hs4Jd6Fb1Gc0Ny2Ma8"}}`)
	eventually(t, 60*time.Second, "the webhook, Slack and the model reached", func() bool {
		return len(hook.of("failed")) == 1 && len(slack.all()) == 1 && len(model.Requests()) == 1
	})
	rec, ok := sqsTaskRecord(t, rc, prefix, "corpus-1")
	if !ok || rec.Outcome != "failed" {
		t.Fatalf("record %+v, want failed", rec)
	}

	sinks := map[string]string{
		"webhook": string(hook.of("failed")[0].body),
		"slack":   string(slack.all()[0].body),
		"prompt":  string(model.Requests()[0].Body),
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
	misses := 0
	for name, s := range sinks {
		all := s + "\n" + unescape.Replace(s)
		// Markers name rules (github_pat) and look-alikes hold prefixes of
		// secrets (-----BEGIN): neither is a leak.
		all = markerRE.ReplaceAllString(all, "")
		for _, l := range look {
			all = strings.ReplaceAll(all, l, "")
		}
		for _, sm := range secrets {
			if l := corpusLeak(all, sm.secret); l != "" {
				misses++
				i := strings.Index(all, l)
				t.Errorf("%s leaks %s: %q in %q", name, sm.kind, l, all[max(0, i-80):min(len(all), i+80)])
			}
		}
		if strings.Contains(all, "ghp_Zq8Lr2Wm5Xn7") {
			t.Errorf("%s leaks the alert name's token", name)
		}
	}
	// Look-alikes reach the record unchanged.
	fps := 0
	for _, l := range look {
		if !strings.Contains(view.Output, l+"\n") {
			fps++
			t.Errorf("look-alike changed in the record: %q", l)
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
