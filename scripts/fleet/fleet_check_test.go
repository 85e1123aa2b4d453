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
