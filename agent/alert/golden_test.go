package alert

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/agent/task"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenNow is the decision time of the golden fixtures: shortly after
// their events.
var goldenNow = time.Date(2026, 11, 30, 14, 1, 0, 0, time.UTC)

// testValidator mirrors the embedded catalog's shapes.
func testValidator(t testing.TB) *task.Validator {
	t.Helper()
	mount, err := task.FullMatch(`/[A-Za-z0-9/_.-]*`)
	if err != nil {
		t.Fatal(err)
	}
	return &task.Validator{
		Allow: []*regexp.Regexp{regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)*$`)},
		Catalog: map[string]task.Spec{
			"uptime":     {},
			"memory":     {},
			"disk-usage": {Params: map[string]*regexp.Regexp{"mount": mount}, Required: []string{"mount"}},
		},
		MaxAge: time.Hour,
	}
}

func loadRoutes(t testing.TB) Routes {
	t.Helper()
	b, err := os.ReadFile("testdata/routes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rs Routes
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

// testRouter routes with testdata/routes.yaml and numbers task ids.
func testRouter(t testing.TB) *Router {
	t.Helper()
	r, err := NewRouter(loadRoutes(t), testValidator(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	r.newID = func() string { n++; return fmt.Sprintf("alert-test-%d", n) }
	return r
}

// golden is what a fixture becomes, as stored in testdata/*.golden.json.
type golden struct {
	Truncated int         `json:"truncated"`
	Accepted  int         `json:"accepted"`
	Ignored   []Outcome   `json:"ignored"`
	Rejected  []Outcome   `json:"rejected"`
	Alerts    []Item      `json:"alerts"`
	Routes    []string    `json:"routes"`
	Tasks     []task.Task `json:"tasks"`
}

// TestGolden routes every fixture with testdata/routes.yaml and compares
// the answer and the tasks with its golden file (go test -update rewrites
// them; review the diff).
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		file   string
		decode func([]byte) (Payload, error)
	}{
		{"alertmanager_v4.json", DecodeAlertmanager},
		{"zabbix6_problem.json", DecodeZabbix},
		{"zabbix6_recovery.json", DecodeZabbix},
		{"zabbix7_unresolved_macro.json", DecodeZabbix},
		{"zabbix7_tag_list.json", DecodeZabbix},
		{"sns_cloudwatch_alarm.json", DecodeCloudWatch},
		{"sns_cloudwatch_ok.json", DecodeCloudWatch},
		{"eventbridge_alarm.json", DecodeCloudWatch},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			p, err := tc.decode(body)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			ans := testRouter(t).RoutePayload(p, goldenNow)
			g := golden{Truncated: p.Truncated, Accepted: ans.Accepted, Ignored: ans.Ignored, Rejected: ans.Rejected, Tasks: ans.Tasks, Routes: []string{}, Alerts: p.Items}
			if g.Tasks == nil {
				g.Tasks = []task.Task{}
			}
			if g.Alerts == nil {
				g.Alerts = []Item{}
			}
			for _, it := range p.Items {
				g.Routes = append(g.Routes, fmt.Sprintf("%d:%s", it.Index, ans.Decisions[it.Index].Route))
			}
			got, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", tc.file[:len(tc.file)-len(".json")]+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s:\n%s", tc.file, path, got)
			}
		})
	}
}
