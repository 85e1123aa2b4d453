package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MarkScript is the ledger's diagnostic, run as /bin/sh SCRIPT ID
// [secs|gate]: it appends "ID<TAB>unix time" to the ledger, then sleeps
// secs or waits for the gate file (at most a minute, a diagnostic's
// timeout). A format given the ledger's path (%[1]s) and the gate's
// (%[2]s); the task id only ever travels as an argv element.
const MarkScript = `#!/bin/sh
printf '%%s\t%%s\n' "$1" "$(date +%%s.%%N)" >> '%[1]s'
case "$2" in
'') ;;
gate) n=0; while [ ! -e '%[2]s' ] && [ $n -lt 3000 ]; do /bin/sleep 0.02; n=$((n+1)); done ;;
*) exec /bin/sleep "$2" ;;
esac
`

// Ledger is the file the diagnostics of a catalog append a line to per
// execution, so executions are counted (and timed) per key; Gate is a file
// diagnostics may wait for.
type Ledger struct {
	Dir, Path, Script, Gate string
}

// NewLedger writes the script name into dir from script, a format given
// the ledger's path (%[1]s) and the gate's (%[2]s); MarkScript is the
// usual one.
func NewLedger(dir, name, script string) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	l := &Ledger{Dir: dir, Path: filepath.Join(dir, "ledger"), Script: filepath.Join(dir, name), Gate: filepath.Join(dir, "gate")}
	if err := os.WriteFile(l.Script, fmt.Appendf(nil, script, l.Path, l.Gate), 0o644); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return l, nil
}

// Open lets every diagnostic waiting at the gate finish.
func (l *Ledger) Open() { _ = os.WriteFile(l.Gate, nil, 0o644) }

// Counts returns how many times each key (a line up to its tab: a task
// id, or what another script writes) was written, and the time of its
// first line where the line has one.
func (l *Ledger) Counts() (map[string]int, map[string]time.Time, error) {
	n, first := map[string]int{}, map[string]time.Time{}
	b, err := os.ReadFile(l.Path)
	if os.IsNotExist(err) {
		return n, first, nil
	}
	if err != nil {
		return n, first, fmt.Errorf("ledger: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		key, ts, hasTime := strings.Cut(line, "\t")
		if line == "" {
			continue
		}
		n[key]++
		if _, seen := first[key]; seen || !hasTime {
			continue
		}
		if f, err := strconv.ParseFloat(ts, 64); err == nil {
			sec := int64(f)
			first[key] = time.Unix(sec, int64((f-float64(sec))*1e9))
		}
	}
	return n, first, nil
}

// OnceEach checks that every key of want was written exactly once: how
// many never were (lost) and how many more than once (twice).
func (l *Ledger) OnceEach(want []string) (lost, twice int) {
	n, _, _ := l.Counts()
	for _, id := range want {
		switch {
		case n[id] == 0:
			lost++
		case n[id] > 1:
			twice++
		}
	}
	return lost, twice
}

// IDs are prefix-0 … prefix-(n-1).
func IDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// TaskBody is a task message for host web-1.
func TaskBody(id, diagnostic string) string {
	return fmt.Sprintf(`{"id":%q,"host":"web-1","diagnostic":%q}`, id, diagnostic)
}
