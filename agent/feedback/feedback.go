package feedback

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
)

// Verdicts.
const (
	Good  = "good"
	Wrong = "wrong"
)

// Bounds of a verdict's fields.
const (
	MaxBy   = 128
	MaxNote = 1024
	// LogMax caps the log the precision table is computed from.
	LogMax = 100000
)

// Verdict is one person's judgement of one task's report.
type Verdict struct {
	TaskID  string    `json:"task_id"`
	Verdict string    `json:"verdict"`
	By      string    `json:"by"`
	Note    string    `json:"note,omitempty"`
	At      time.Time `json:"at"`
	// Diagnostic and Confidence place it in the table: the category is
	// the diagnostic the report is on, with the report's confidence.
	Diagnostic string `json:"diagnostic"`
	Confidence string `json:"confidence,omitempty"`
}

// ErrAlreadyRecorded: this person judged this task before; the first
// verdict stands.
var ErrAlreadyRecorded = errors.New("feedback: this person already gave a verdict on this task")

// Validate checks what a person sends: the verdict, who (printable, at
// most MaxBy bytes) and the note (at most MaxNote bytes).
func (v Verdict) Validate() error {
	var errs []error
	if v.Verdict != Good && v.Verdict != Wrong {
		errs = append(errs, fmt.Errorf("verdict %q: must be %s or %s", v.Verdict, Good, Wrong))
	}
	if strings.TrimSpace(v.By) == "" || len(v.By) > MaxBy || strings.ContainsFunc(v.By, unicode.IsControl) {
		errs = append(errs, fmt.Errorf("by: must name the person, printable, at most %d bytes", MaxBy))
	}
	if len(v.Note) > MaxNote {
		errs = append(errs, fmt.Errorf("note: at most %d bytes", MaxNote))
	}
	return errors.Join(errs...)
}

// Store keeps verdicts.
type Store interface {
	// Record keeps v unless v.By judged v.TaskID before: then it returns
	// the earlier verdict and ErrAlreadyRecorded.
	Record(ctx context.Context, v Verdict) (Verdict, error)
	// Log returns the verdicts of the log, oldest first (at most LogMax).
	Log(ctx context.Context) ([]Verdict, error)
}

// Row is one line of the precision table.
type Row struct {
	Diagnostic string `json:"diagnostic"`
	Confidence string `json:"confidence"`
	Good       int    `json:"good"`
	Wrong      int    `json:"wrong"`
	// Precision is good / (good + wrong); 0 without verdicts.
	Precision float64 `json:"precision"`
	// Resolved counts the reports whose alert resolved, Within1h those
	// that resolved within 1 h of the report; WithinShare is their ratio
	// (0 when none resolved).
	Resolved    int     `json:"resolved"`
	Within1h    int     `json:"resolved_within_1h"`
	WithinShare float64 `json:"resolved_within_1h_share"`
}

// Resolution is a report whose alert resolved, as the table counts it.
type Resolution struct {
	Diagnostic, Confidence string
	Within1h               bool
}

// Table counts verdicts and resolutions by diagnostic and confidence
// ("" shown as "none"), sorted by diagnostic, then confidence.
func Table(vs []Verdict, rs []Resolution) []Row {
	type key struct{ d, c string }
	m := map[key]*Row{}
	row := func(d, c string) *Row {
		if c == "" {
			c = "none"
		}
		k := key{d, c}
		r := m[k]
		if r == nil {
			r = &Row{Diagnostic: d, Confidence: c}
			m[k] = r
		}
		return r
	}
	for _, v := range vs {
		r := row(v.Diagnostic, v.Confidence)
		if v.Verdict == Good {
			r.Good++
		} else {
			r.Wrong++
		}
	}
	for _, x := range rs {
		r := row(x.Diagnostic, x.Confidence)
		r.Resolved++
		if x.Within1h {
			r.Within1h++
		}
	}
	rows := make([]Row, 0, len(m))
	for _, r := range m {
		if n := r.Good + r.Wrong; n > 0 {
			r.Precision = float64(r.Good) / float64(n)
		}
		if r.Resolved > 0 {
			r.WithinShare = float64(r.Within1h) / float64(r.Resolved)
		}
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Diagnostic != rows[j].Diagnostic {
			return rows[i].Diagnostic < rows[j].Diagnostic
		}
		return rows[i].Confidence < rows[j].Confidence
	})
	return rows
}
