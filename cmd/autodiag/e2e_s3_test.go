package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/testenv"
)

// A task whose output is far larger than its max_output and holds an AWS
// key, in fleet mode (SQS fake, Redis, gofakes3 on loopback behind
// AWS_ENDPOINT_URL_S3): the object holds the whole output redacted, the
// Redis record max_output and output_url, and GET /v1/tasks, `autodiag
// show` and the webhook event show the URL.
func TestResultsFullOutputToS3(t *testing.T) {
	const bucket, prefix = "autodiag-results", "fleet/e2e"
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	fake := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(fake.Close)
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(fake.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")})

	// 300 KiB of output, an AWS key on its first line.
	var out strings.Builder
	out.WriteString("key id: " + leakAccessKey + "\n")
	for i := 0; out.Len() < 300<<10; i++ {
		fmt.Fprintf(&out, "line %06d of a chatty diagnostic\n", i)
	}
	outPath := filepath.Join(t.TempDir(), "out.txt")
	if err := os.WriteFile(outPath, []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	redacted := strings.Replace(out.String(), leakAccessKey, "[REDACTED:aws_access_key_id]", 1)

	rc, redisPrefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	hook := newHookReceiver(t, 0)
	cfg := sqsAgentConfig{instance: "agent-s3", workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: redisPrefix}
	yaml := strings.Replace(cfg.yaml(), "limiter:\n",
		fmt.Sprintf("  - name: dump\n    command: [/bin/cat, '%s']\n    timeout: 10s\n    max_output: 4KiB\nlimiter:\n", outPath), 1) +
		fmt.Sprintf("results:\n  s3:\n    bucket: %s\n    prefix: %s\n    sse: AES256\n    path_style: true\n", bucket, prefix) +
		notifyYAML(hook.srv.URL, "succeeded")
	// dump reads this machine's file: the agent answers for web-1.
	env := append([]string{"E2E_WEBHOOK_SECRET=" + webhookSecret, "AWS_ENDPOINT_URL_S3=" + fake.URL, "AUTODIAG_HOST_NAMES=web-1"}, fq.env...)
	a := startProc(t, yaml, env...)

	fq.send(t, `{"id":"big-1","host":"web-1","diagnostic":"dump"}`)
	eventually(t, 30*time.Second, "the succeeded event delivered", func() bool { return len(hook.of("succeeded")) == 1 })

	rec, ok := sqsTaskRecord(t, rc, redisPrefix, "big-1")
	if !ok || rec.Outcome != "succeeded" {
		t.Fatalf("record %+v, want succeeded", rec)
	}
	key := prefix + "/" + rec.FinishedAt.UTC().Format("2006/01/02") + "/big-1.txt"
	url := "s3://" + bucket + "/" + key
	if rec.OutputURL != url || rec.OutputUpload != "" {
		t.Errorf("record output_url %q output_upload %q, want %s", rec.OutputURL, rec.OutputUpload, url)
	}
	if !rec.Truncated || rec.Output != redacted[:4<<10]+runner.TruncationMark {
		t.Errorf("record output is %d bytes (truncated %v), want the first 4KiB of the redacted output and the mark", len(rec.Output), rec.Truncated)
	}
	assertNoSecret(t, "stored record", rec.Output)

	obj, err := s3c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", url, err)
	}
	body, err := io.ReadAll(obj.Body)
	obj.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != redacted {
		t.Errorf("object holds %d bytes, want the %d bytes of the redacted output", len(body), len(redacted))
	}
	assertNoSecret(t, "uploaded object", string(body))

	resp, err := a.get("/v1/tasks/big-1")
	if err != nil {
		t.Fatal(err)
	}
	var view taskview.Task
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || view.OutputURL != url {
		t.Errorf("GET /v1/tasks/big-1: %d output_url %q (%v), want %s", resp.StatusCode, view.OutputURL, err, url)
	}
	var ev notify.Event
	if err := json.Unmarshal(hook.of("succeeded")[0].body, &ev); err != nil || ev.Task == nil || ev.Task.OutputURL != url {
		t.Errorf("webhook event task %+v (%v), want output_url %s", ev.Task, err, url)
	}
	code, stdout, stderr := runCLI(t, nil, "show", "big-1", "--config", sqsWriteConfig(t, yaml))
	if code != 0 || !strings.Contains(stdout, "full output: "+url) {
		t.Errorf("show: exit %d, want a line \"full output: %s\":\n%s%s", code, url, stdout, stderr)
	}
	if m := a.metrics(); !strings.Contains(m, `autodiag_output_uploads_total{result="ok"} 1`) {
		t.Errorf("metrics lack one ok upload:\n%s", grepLines(m, "autodiag_output_uploads_total"))
	}

	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
}
