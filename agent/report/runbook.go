package report

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"

	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/configerr"
)

// Runbook is one entry of report.runbooks: a local Markdown file given to
// an investigation's model when the alert matches (its name the Alert
// regexp, each of Labels' regexps its label; the first entry that
// matches). The file is read at start, cut to MaxRunbookBytes and
// redacted.
type Runbook struct {
	Alert  string            `yaml:"alert"`
	Labels map[string]string `yaml:"labels"`
	File   string            `yaml:"file"`
}

// MaxRunbookBytes bounds one runbook in the prompt; MaxRunbooks the
// entries.
const (
	MaxRunbookBytes = 8 << 10
	MaxRunbooks     = 100
)

// validateRunbooks checks report.runbooks: regexps that compile, absolute
// file paths, a bounded list.
func validateRunbooks(rbs []Runbook) error {
	var errs []error
	if len(rbs) > MaxRunbooks {
		errs = append(errs, configerr.Errorf("runbooks", "must hold at most %d entries, got %d", MaxRunbooks, len(rbs)))
	}
	for i, rb := range rbs {
		key := fmt.Sprintf("runbooks[%d]", i)
		if rb.Alert == "" && len(rb.Labels) == 0 {
			errs = append(errs, configerr.Errorf(key, "must set alert or labels (an entry for every alert is a catch-all: use alert: '.')"))
		}
		if _, err := regexp.Compile(rb.Alert); err != nil {
			errs = append(errs, configerr.Errorf(key+".alert", "invalid regexp: %w", err))
		}
		for k, v := range rb.Labels {
			if _, err := regexp.Compile(v); err != nil {
				errs = append(errs, configerr.Errorf(key+".labels."+k, "invalid regexp: %w", err))
			}
		}
		if !filepath.IsAbs(rb.File) {
			errs = append(errs, configerr.Errorf(key+".file", "must be an absolute path, got %q", rb.File))
		}
	}
	return errors.Join(errs...)
}

// Runbooks are report.runbooks compiled, with each file's text.
type Runbooks struct {
	entries []runbookEntry
}

type runbookEntry struct {
	alert  *regexp.Regexp
	labels map[string]*regexp.Regexp
	file   string
	text   string
}

// LoadRunbooks compiles rbs (validated) and reads each file with read,
// cut to MaxRunbookBytes; a file that cannot be read is an error naming
// its key.
func LoadRunbooks(rbs []Runbook, read func(string) ([]byte, error)) (*Runbooks, error) {
	out := &Runbooks{}
	for i, rb := range rbs {
		b, err := read(rb.File)
		if err != nil {
			return nil, configerr.Errorf(fmt.Sprintf("report.runbooks[%d].file", i), "%w", err)
		}
		e := runbookEntry{alert: regexp.MustCompile(rb.Alert), labels: map[string]*regexp.Regexp{}, file: rb.File}
		for k, v := range rb.Labels {
			e.labels[k] = regexp.MustCompile(v)
		}
		text, _ := CutAnswer(string(b), MaxRunbookBytes)
		e.text = text
		out.entries = append(out.entries, e)
	}
	return out, nil
}

// For is the runbook of alert a: its file and text; ok false when none
// matches.
func (r *Runbooks) For(a taskview.Alert) (file, text string, ok bool) {
	if r == nil {
		return "", "", false
	}
next:
	for _, e := range r.entries {
		if !e.alert.MatchString(a.Name) {
			continue
		}
		for k, re := range e.labels {
			if !re.MatchString(a.Labels[k]) {
				continue next
			}
		}
		return e.file, e.text, true
	}
	return "", "", false
}
