package config

import (
	"strings"
	"testing"
	"time"
)

// A placeholder in a program position, or in the program text of awk,
// sed, php, lua or a shell behind a wrapper or find -exec, is refused and
// named by its index; placeholders in plain arguments are not.
func TestCatalogStaysACatalog(t *testing.T) {
	tests := []struct {
		argv []string
		bad  string // "" = accepted; else the command index refused
	}{
		{[]string{"/usr/bin/env", "{param.x}"}, "command[1]"},
		{[]string{"{param.x}", "-a"}, "command[0]"},
		{[]string{"timeout", "5", "{param.x}"}, "command[2]"},
		{[]string{"sudo", "-u", "root", "{param.x}"}, "command[3]"},
		{[]string{"flock", "/tmp/l", "{param.x}"}, "command[2]"},
		{[]string{"xargs", "-n", "1", "{param.x}"}, "command[3]"},
		{[]string{"chroot", "/", "{param.x}"}, "command[2]"},
		{[]string{"nsenter", "-t", "1", "-m", "{param.x}"}, "command[4]"},
		{[]string{"doas", "{param.x}"}, "command[1]"},
		{[]string{"awk", "BEGIN{system(\"{param.x}\")}"}, "command[1]"},
		{[]string{"gawk", "-F:", "{param.x}", "/etc/passwd"}, "command[2]"},
		{[]string{"sed", "-n", "{param.x}", "/etc/hosts"}, "command[2]"},
		{[]string{"sed", "-e", "s/a/{param.x}/", "f"}, "command[2]"},
		{[]string{"php", "-r", "echo {param.x};"}, "command[2]"},
		{[]string{"lua", "-e", "print({param.x})"}, "command[2]"},
		{[]string{"find", "/var", "-exec", "{param.x}", ";"}, "command[3]"},
		{[]string{"find", "/var", "-exec", "sh", "-c", "echo {param.x}", ";"}, "command[5]"},
		{[]string{"sudo", "sh", "-c", "echo {param.x}"}, "command[3]"},
		// accepted: values as arguments
		{[]string{"awk", "-v", "x={param.x}", "{print x}"}, ""},
		{[]string{"awk", "{print}", "{param.file}"}, ""},
		{[]string{"sed", "-n", "1,5p", "{param.file}"}, ""},
		{[]string{"find", "{param.dir}", "-name", "*.log"}, ""},
		{[]string{"timeout", "5", "ping", "-c", "1", "{host}"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			var p problems
			checkScripts(&p, "diagnostics[0]", tt.argv)
			err := p.err()
			switch {
			case tt.bad == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), "diagnostics[0]."+tt.bad)):
				t.Errorf("got %v, want a refusal of %s", err, tt.bad)
			}
		})
	}
}

// catalog.strict: placeholders only in arguments of programs that run no
// other program; without it those entries pass.
func TestCatalogStrict(t *testing.T) {
	tests := []struct {
		argv []string
		bad  bool
	}{
		{[]string{"/usr/bin/ping", "-c", "1", "{host}"}, false},
		{[]string{"/usr/bin/timeout", "5", "/usr/bin/ping", "{host}"}, true},
		{[]string{"/bin/sh", "-c", "echo \"$1\"", "sh", "{param.x}"}, true},
		{[]string{"/usr/bin/awk", "{print}", "{param.file}"}, true},
		{[]string{"/usr/bin/find", "{param.dir}", "-name", "*.log"}, true},
		{[]string{"/usr/bin/env", "LC_ALL=C", "/usr/bin/df", "{param.mount}"}, true},
		{[]string{"/usr/bin/uptime"}, false},
	}
	for _, tt := range tests {
		var p problems
		checkStrict(&p, "diagnostics[0]", tt.argv)
		if err := p.err(); (err != nil) != tt.bad {
			t.Errorf("%v: got %v, want refused=%v", tt.argv, err, tt.bad)
		} else if err != nil && !strings.Contains(err.Error(), "diagnostics[0].command[") {
			t.Errorf("%v: %v does not name the position", tt.argv, err)
		}
	}
}

// runs_on: the default follows {host} in the command; runs_on any on an
// entry without {host} is an error naming the entry and its line, as is
// a value other than target or any.
func TestCatalogRunsOn(t *testing.T) {
	tests := []struct {
		name     string
		entry    string
		targeted bool
		bad      string // "" = accepted; else a word the error must hold
	}{
		{"default without host is target", "command: [/usr/bin/uptime]", true, ""},
		{"default with host is any", "command: [/usr/bin/ping, '{host}']", false, ""},
		{"target with host", "command: [/usr/bin/ping, '{host}']\n    runs_on: target", true, ""},
		{"any with host", "command: [/usr/bin/ping, '{host}']\n    runs_on: any", false, ""},
		{"any without host", "command: [/usr/bin/uptime]\n    runs_on: any", false, "needs {host}"},
		{"unknown value", "command: [/usr/bin/uptime]\n    runs_on: anywhere", false, "must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yml := "diagnostics:\n  - name: probe\n    " + tt.entry + "\n"
			cfg, err := Load([]byte(yml), nil)
			if tt.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got := cfg.Diagnostics[0].Targeted(); got != tt.targeted {
					t.Errorf("Targeted() = %v, want %v", got, tt.targeted)
				}
				return
			}
			ps := Problems(err)
			if len(ps) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			p := ps[0]
			if p.Key != "diagnostics[0].runs_on" || p.Line != 4 || !strings.Contains(p.Error(), `"probe"`) || !strings.Contains(p.Error(), tt.bad) {
				t.Errorf("got %q (key %s, line %d), want diagnostics[0].runs_on at line 4 naming \"probe\" and saying %q", p.Error(), p.Key, p.Line, tt.bad)
			}
		})
	}
}

// host_names: each entry must be a host a task could name (the error
// names host_names[i] and its line); AUTODIAG_HOST_NAMES replaces the
// list, comma-separated; queue.target_wait defaults to 2m and may not be
// negative.
func TestHostNamesAndTargetWait(t *testing.T) {
	cfg, err := Load([]byte("host_names: [web-1.example, 'bad host']\nqueue:\n  target_wait: -1s\n"), nil)
	ps := Problems(err)
	keys := map[string]int{}
	for _, p := range ps {
		keys[p.Key] = p.Line
	}
	if len(ps) != 2 || keys["host_names[1]"] != 1 || keys["queue.target_wait"] != 3 {
		t.Errorf("problems %v; want host_names[1] at line 1 and queue.target_wait at line 3", err)
	}
	env := map[string]string{"AUTODIAG_HOST_NAMES": " a.example, b.example ,,"}
	cfg, err = Load([]byte("host_names: [web-1.example]\n"), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || strings.Join(cfg.HostNames, ",") != "a.example,b.example" || cfg.Queue.TargetWait != DefaultTargetWait || DefaultTargetWait != 2*time.Minute {
		t.Errorf("with AUTODIAG_HOST_NAMES: host_names %v, target_wait %s, %v; want a.example,b.example and 2m", cfg.HostNames, cfg.Queue.TargetWait, err)
	}
}
