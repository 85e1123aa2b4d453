package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The fleet's must-holds are only as good as the replay of the marks: each
// rule's check must catch one run too many.
func TestCheckLimits(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	runAt := func(id, diag string, start, end float64) markRun {
		return markRun{id: id, host: "host-00", diag: diag, inst: "i-1", start: at(start), end: at(end)}
	}
	tests := []struct {
		name string
		runs []markRun
		want int // violations
	}{
		{"cap met", []markRun{runAt("a", "quick", 0, 5), runAt("b", "quick", 1, 5), runAt("c", "quick", 2, 5), runAt("d", "quick", 5, 6)}, 0},
		{"cap exceeded", []markRun{runAt("a", "quick", 0, 5), runAt("b", "quick", 1, 5), runAt("c", "quick", 2, 5), runAt("d", "quick", 4.9, 6)}, 1},
		{"quota met, a re-run counts once", []markRun{runAt("a", "disk", 0, 1), runAt("a", "disk", 40, 41), runAt("b", "disk", 2, 3), runAt("c", "disk", 4, 5), runAt("d", "disk", 6, 7), runAt("e", "disk", 8, 9)}, 0},
		{"quota exceeded", []markRun{runAt("a", "disk", 0, 1), runAt("b", "disk", 2, 3), runAt("c", "disk", 4, 5), runAt("d", "disk", 6, 7), runAt("e", "disk", 8, 9), runAt("f", "disk", 10, 11)}, 1},
		{"interval within the mark tolerance", []markRun{runAt("a", "trace", 0, 1), runAt("b", "trace", 4.6, 5)}, 0},
		{"interval too short", []markRun{runAt("a", "trace", 0, 1), runAt("b", "trace", 4.4, 5)}, 1},
		{"window met", windowRuns(at, 10, 60), 0},
		{"window exceeded", windowRuns(at, 11, 55), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fleetRun{t0: t0}
			lr := r.checkLimits(tt.runs)
			if lr.Violations != tt.want {
				t.Errorf("violations = %d, want %d", lr.Violations, tt.want)
			}
			// The runs behind a violation are named.
			if tt.name == "interval too short" && (len(lr.MinGapRuns) != 2 || lr.MinGapRuns[1] != "b i-1 (stays) 4.400 → 5.000") {
				t.Errorf("min-gap runs %q, want a's and b's", lr.MinGapRuns)
			}
			if tt.name == "window exceeded" && len(lr.WindowRuns) != 11 {
				t.Errorf("window runs %q, want the 11", lr.WindowRuns)
			}
		})
	}
}

// windowRuns spreads n netstat starts evenly over span seconds.
func windowRuns(at func(float64) time.Time, n int, span float64) []markRun {
	var out []markRun
	for i := range n {
		s := span * float64(i) / float64(n)
		out = append(out, markRun{id: string(rune('a' + i)), host: "host-00", diag: "netstat", inst: "i-1", start: at(s), end: at(s + 0.1)})
	}
	return out
}

func TestReadMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks")
	// Two runs of t-1 (the first on an instance that died before its end
	// mark) and lines of concurrent runs interleaved.
	marks := "S t-1 host-01 quick i-1 100.000000\n" +
		"S t-2 host-02 disk i-2 100.500000\n" +
		"E t-2 host-02 disk i-2 100.750000\n" +
		"S t-1 host-01 quick i-3 131.000000\n" +
		"E t-1 host-01 quick i-3 132.000000\n" +
		"garbage\n"
	if err := os.WriteFile(path, []byte(marks), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := readMarks(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("runs = %d, want 3: %+v", len(runs), runs)
	}
	if !runs[0].end.IsZero() || runs[0].inst != "i-1" {
		t.Errorf("first run of t-1 = %+v, want no end on i-1", runs[0])
	}
	if got := runs[2].end.Sub(runs[2].start); runs[2].inst != "i-3" || got != time.Second {
		t.Errorf("second run of t-1 = %+v (%s), want 1s on i-3", runs[2], got)
	}
	if got := runs[1].end.Sub(runs[1].start); got != 250*time.Millisecond {
		t.Errorf("t-2 ran %s, want 250ms", got)
	}
}

func TestBusiestOf(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	many := func(n int, s float64) []time.Time {
		ts := make([]time.Time, n)
		for i := range ts {
			ts[i] = at(s)
		}
		return ts
	}
	// Window 0: agent 0 ends 60 of 100; window 1: agent 1 ends 40 of 100;
	// window 2 has too few tasks to count.
	ends := [][]time.Time{
		append(many(60, 1), many(30, 11)...),
		append(many(20, 2), append(many(40, 12), many(5, 21)...)...),
		append(many(20, 3), many(30, 13)...),
	}
	got := busiestOf(ends, t0)
	if got.Windows != 2 || got.MaxShare != 0.6 || got.MedianShare != 0.4 {
		t.Errorf("busiestOf = %+v, want 2 windows, max 0.6, median 0.4", got)
	}
	if got := busiestOf(nil, t0); got.Windows != 0 || got.MaxShare != 0 {
		t.Errorf("busiestOf(no tasks) = %+v, want no window", got)
	}
}

// A drain is timed against the work it took on: a task that had its
// worker at the trigger but whose diagnostic began after it (its lease and
// limiter decision took a moment on a loaded machine) is the drain's own,
// while runs beyond what the drain took on are work taken after the intake
// stopped. Before the "drain started" line said what the drain took on,
// such a drain counted nothing in flight: "3.8 s with nothing running".
func TestDrainBound(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	run := func(id, inst string, start, end float64) markRun {
		return markRun{id: id, host: "node-001", diag: "quick", inst: inst, start: at(start), end: at(end)}
	}
	trigger := at(10)
	tests := []struct {
		name                    string
		runs                    []markRun
		tookOn                  int
		longest, lateEnd        float64
		takenOnLate, notTakenOn int
	}{
		{"taken on, begun 0.2 s after the trigger", []markRun{run("a", "i-1", 10.2, 13.8)}, 1, 3.8, 3.8, 1, 0},
		{"begun after the trigger, not taken on", []markRun{run("a", "i-1", 10.2, 13.8)}, 0, 0, 3.8, 0, 1},
		{"a line that does not say: nothing taken on", []markRun{run("a", "i-1", 10.2, 13.8)}, -1, 0, 3.8, 0, 1},
		{"the one taken on is the one running", []markRun{run("a", "i-1", 9, 11), run("b", "i-1", 10.5, 17)}, 1, 1, 7, 0, 1},
		{"the earliest begun are the drain's own", []markRun{run("b", "i-1", 10.9, 19), run("a", "i-1", 10.3, 12)}, 1, 2, 9, 1, 1},
		{"ended before the trigger, or on another agent", []markRun{run("a", "i-1", 5, 9.9), run("b", "i-2", 9, 30), run("c", "i-2", 11, 30)}, 2, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := drainBoundOf(tt.runs, "i-1", trigger, tt.tookOn)
			near := func(x, y float64) bool { return x-y < 1e-6 && y-x < 1e-6 }
			if !near(b.longest, tt.longest) || !near(b.lateEnd, tt.lateEnd) || b.takenOnLate != tt.takenOnLate || b.notTakenOn != tt.notTakenOn {
				t.Errorf("drainBoundOf = %+v, want longest %.1f, late end %.1f, %d taken on late, %d not taken on",
					b, tt.longest, tt.lateEnd, tt.takenOnLate, tt.notTakenOn)
			}
		})
	}
}

func TestTookOnAt(t *testing.T) {
	for _, tc := range []struct {
		line map[string]any
		want int
	}{
		{map[string]any{"msg": "drain started", "running": 2.0, "queued": 1.0}, 3},
		{map[string]any{"msg": "drain started", "running": 0.0, "queued": 0.0}, 0},
		{map[string]any{"msg": "drain started"}, -1},
	} {
		if got := tookOnAt(tc.line); got != tc.want {
			t.Errorf("tookOnAt(%v) = %d, want %d", tc.line, got, tc.want)
		}
	}
}
