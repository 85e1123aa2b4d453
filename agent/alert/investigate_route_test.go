package alert

import (
	"strings"
	"testing"
	"time"
)

// TestRouteInvestigateAlways: a route's `investigate: always` reaches its
// tasks (with the alert's context: labels, annotations, start, route),
// bounded; any other value is a config error naming the key.
func TestRouteInvestigateAlways(t *testing.T) {
	r, err := NewRouter(Routes{{Name: "disk", Investigate: InvestigateAlways, Tasks: []RouteTask{{Diagnostic: "df"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 3, 10, 0, 0, 0, time.UTC)
	labels := map[string]string{"instance": "web-1", "huge": strings.Repeat("x", 5000)}
	for i := range 50 {
		labels[strings.Repeat("k", i+1)] = "v"
	}
	d := r.Route(Received{Source: "alertmanager", Name: "DiskFull", Host: "web-1", Status: StatusFiring, StartsAt: now.Add(-time.Hour),
		Labels: labels, Annotations: map[string]string{"runbook_url": "https://wiki.example.com/disk"}}, now)
	if len(d.Tasks) != 1 {
		t.Fatalf("%+v", d)
	}
	a := d.Tasks[0].Alert
	if a.Investigate != InvestigateAlways || a.Route != "disk" || !a.StartsAt.Equal(now.Add(-time.Hour)) ||
		a.Annotations["runbook_url"] != "https://wiki.example.com/disk" || len(a.Labels) != 32 || len(a.Labels["huge"]) > 1024 {
		t.Fatalf("alert %+v (%d labels)", a, len(a.Labels))
	}
	err = Routes{{Name: "x", Investigate: "sometimes", Tasks: []RouteTask{{Diagnostic: "df"}}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "[0].investigate") {
		t.Fatalf("Validate = %v", err)
	}
}
