package config

import (
	"os"
	"strings"
	"testing"
)

// Each attempt of the third adversarial round that passed the catalog
// check, and its close variants, is refused at the index of the
// placeholder; the ordinary uses of the same programs are not.
func TestCatalogRefusesCommandRunningOptions(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		bad  string // "" = accepted; else the command index refused
	}{
		// flock FILE -c: the shell runs the command.
		{"flock -c", []string{"/usr/bin/flock", "/tmp/l", "-c", "echo {param.x}"}, "command[3]"},
		{"flock --command", []string{"/usr/bin/flock", "-w", "5", "/tmp/l", "--command", "echo {param.x}"}, "command[5]"},
		// ssh options that run a command.
		{"ssh -o ProxyCommand=", []string{"/usr/bin/ssh", "-o", "ProxyCommand={param.x}", "{host}", "uptime"}, "command[2]"},
		{"ssh -oProxyCommand=", []string{"/usr/bin/ssh", "-oProxyCommand={param.x}", "{host}", "uptime"}, "command[1]"},
		{"ssh -o 'ProxyCommand x'", []string{"/usr/bin/ssh", "-o", "proxycommand {param.x}", "{host}", "uptime"}, "command[2]"},
		{"ssh LocalCommand", []string{"/usr/bin/ssh", "-o", "PermitLocalCommand=yes", "-o", "LocalCommand={param.x}", "{host}", "uptime"}, "command[4]"},
		{"ssh KnownHostsCommand", []string{"/usr/bin/ssh", "-o", "KnownHostsCommand={param.x}", "{host}", "uptime"}, "command[2]"},
		{"ssh Match exec", []string{"/usr/bin/ssh", "-o", "Match exec {param.x}", "{host}", "uptime"}, "command[2]"},
		{"ssh -o placeholder", []string{"/usr/bin/ssh", "-o", "{param.x}", "{host}", "uptime"}, "command[2]"},
		{"ssh -Bo cluster", []string{"/usr/bin/ssh", "-4o", "ProxyCommand={param.x}", "{host}", "uptime"}, "command[2]"},
		// An interpreter's first operand is the script it runs.
		{"sh FILE", []string{"/bin/sh", "{param.x}"}, "command[1]"},
		{"bash -e FILE", []string{"/bin/bash", "-e", "{param.x}", "a"}, "command[2]"},
		{"python3 FILE", []string{"/usr/bin/python3", "-u", "{param.x}"}, "command[2]"},
		{"python3 -m MODULE", []string{"/usr/bin/python3", "-m", "{param.x}"}, "command[2]"},
		{"perl FILE", []string{"/usr/bin/perl", "{param.x}"}, "command[1]"},
		{"perl5.36 FILE", []string{"/usr/bin/perl5.36", "-w", "{param.x}"}, "command[2]"},
		{"perl -M", []string{"/usr/bin/perl", "-M{param.x}", "-e", "1"}, "command[1]"},
		{"ruby FILE", []string{"/usr/bin/ruby", "{param.x}"}, "command[1]"},
		{"ruby -r", []string{"/usr/bin/ruby", "-r", "{param.x}", "-e", "1"}, "command[2]"},
		{"node FILE", []string{"/usr/bin/node", "{param.x}"}, "command[1]"},
		{"node -r", []string{"/usr/bin/node", "-r", "{param.x}", "/opt/a.js"}, "command[2]"},
		{"php FILE", []string{"/usr/bin/php", "{param.x}"}, "command[1]"},
		{"php -f", []string{"/usr/bin/php", "-f", "{param.x}"}, "command[2]"},
		{"lua FILE", []string{"/usr/bin/lua5.4", "{param.x}"}, "command[1]"},
		{"awk -f", []string{"/usr/bin/awk", "-f", "{param.x}", "/etc/hosts"}, "command[2]"},
		{"sed -f", []string{"/usr/bin/sed", "-f", "{param.x}", "/etc/hosts"}, "command[2]"},
		{"env sh FILE", []string{"/usr/bin/env", "sh", "{param.x}"}, "command[2]"},
		// script, tar, sort, git, watch.
		{"script -c", []string{"/usr/bin/script", "-q", "-c", "echo {param.x}", "/dev/null"}, "command[3]"},
		{"script -qc", []string{"/usr/bin/script", "-qc", "echo {param.x}", "/dev/null"}, "command[2]"},
		{"script --command=", []string{"/usr/bin/script", "--command=echo {param.x}", "/dev/null"}, "command[1]"},
		{"tar --to-command=", []string{"/usr/bin/tar", "-xf", "/tmp/a.tar", "--to-command={param.x}"}, "command[3]"},
		{"tar --to-command", []string{"/usr/bin/tar", "--to-command", "{param.x}", "-xf", "/tmp/a.tar"}, "command[2]"},
		{"tar --to-comm= abbreviated", []string{"/usr/bin/tar", "--to-comm={param.x}", "-xf", "/tmp/a.tar"}, "command[1]"},
		{"tar --use-compress-program=", []string{"/usr/bin/tar", "--use-compress-program={param.x}", "-tf", "/tmp/a.tar"}, "command[1]"},
		{"tar -I", []string{"/usr/bin/tar", "-I", "{param.x}", "-tf", "/tmp/a.tar"}, "command[2]"},
		{"tar -tI attached", []string{"/usr/bin/tar", "-tI{param.x}", "-f", "/tmp/a.tar"}, "command[1]"},
		{"tar --checkpoint-action=exec=", []string{"/usr/bin/tar", "--checkpoint=1", "--checkpoint-action=exec={param.x}", "-cf", "/tmp/a.tar", "/etc/hosts"}, "command[2]"},
		{"sort --compress-program=", []string{"/usr/bin/sort", "--compress-program={param.x}", "/tmp/f"}, "command[1]"},
		{"sort --compress-program", []string{"/usr/bin/sort", "-S", "1K", "--compress-program", "{param.x}", "/tmp/f"}, "command[4]"},
		{"git -c core.pager=", []string{"/usr/bin/git", "-c", "core.pager={param.x}", "log"}, "command[2]"},
		{"git -c placeholder", []string{"/usr/bin/git", "-C", "/srv/repo", "-c", "{param.x}", "status"}, "command[4]"},
		{"git --config-env", []string{"/usr/bin/git", "--config-env=core.sshCommand={param.x}", "fetch"}, "command[1]"},
		{"watch", []string{"/usr/bin/watch", "-n", "5", "df", "{param.x}"}, "command[4]"},
		{"watch -x program", []string{"/usr/bin/watch", "-x", "{param.x}"}, "command[2]"},
		{"fish -c", []string{"/usr/bin/fish", "-c", "echo {param.x}"}, "command[2]"},
		{"fish --command=", []string{"/usr/bin/fish", "--command=echo {param.x}"}, "command[1]"},
		{"zsh -fc", []string{"/usr/bin/zsh", "-fc", "echo {param.x}"}, "command[2]"},
		{"dash -c", []string{"/usr/bin/dash", "-c", "echo {param.x}"}, "command[2]"},
		{"ksh -c", []string{"/usr/bin/ksh", "-c", "echo {param.x}"}, "command[2]"},
		{"csh -c", []string{"/bin/csh", "-c", "echo {param.x}"}, "command[2]"},
		// env -S and env -a.
		{"env -S", []string{"/usr/bin/env", "-S", "df {param.x}"}, "command[2]"},
		{"env -a", []string{"/usr/bin/env", "-a", "{param.x}", "/bin/busybox"}, "command[2]"},
		{"env --argv0=", []string{"/usr/bin/env", "--argv0={param.x}", "/bin/busybox"}, "command[1]"},
		{"env -a then sh -c", []string{"/usr/bin/env", "-a", "sh", "/bin/sh", "-c", "echo {param.x}"}, "command[5]"},
		// In find -exec too.
		{"find -exec tar --to-command", []string{"/usr/bin/find", "/var", "-exec", "tar", "--to-command={param.x}", "-xf", "{}", ";"}, "command[4]"},

		// accepted: values as data.
		{"ssh option value", []string{"/usr/bin/ssh", "-o", "ConnectTimeout={param.t}", "-o", "BatchMode=yes", "{host}", "uptime"}, ""},
		{"ssh plain", []string{"/usr/bin/ssh", "-i", "/etc/autodiag/key", "{host}", "uptime"}, ""},
		{"sh fixed script, value after", []string{"/bin/sh", "/opt/diag/check.sh", "{param.x}"}, ""},
		{"python fixed script, value after", []string{"/usr/bin/python3", "/opt/diag/check.py", "{param.x}"}, ""},
		{"sh -s reads stdin", []string{"/bin/sh", "-s", "{param.x}"}, ""},
		{"tar list a file", []string{"/usr/bin/tar", "-tzf", "{param.file}"}, ""},
		{"sort a file", []string{"/usr/bin/sort", "-k", "2", "{param.file}"}, ""},
		{"git log with a count", []string{"/usr/bin/git", "-C", "/srv/repo", "log", "-n", "{param.n}"}, ""},
		{"flock around a plain command", []string{"/usr/bin/flock", "/tmp/l", "/usr/bin/ping", "-c", "1", "{host}"}, ""},
		{"watch -x with data", []string{"/usr/bin/watch", "-x", "/usr/bin/df", "-h", "{param.mount}"}, ""},
		{"script without a command", []string{"/usr/bin/script", "-q", "{param.file}"}, ""},
		{"env -a fixed", []string{"/usr/bin/env", "-a", "df", "/usr/bin/df", "{param.x}"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p problems
			checkScripts(&p, "diagnostics[0]", tt.argv)
			err := p.err()
			switch {
			case tt.bad == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), "diagnostics[0]."+tt.bad+":")):
				t.Errorf("got %v, want a refusal of %s", err, tt.bad)
			}
		})
	}
}

// catalog.strict refuses a placeholder anywhere in the argv of the
// programs that run commands from their options.
func TestCatalogStrictCoversCommandRunningPrograms(t *testing.T) {
	for _, argv := range [][]string{
		{"/usr/bin/ssh", "{host}", "uptime"},
		{"/usr/bin/tar", "-tzf", "{param.file}"},
		{"/usr/bin/sort", "{param.file}"},
		{"/usr/bin/git", "-C", "{param.dir}", "status"},
		{"/usr/bin/watch", "-x", "/usr/bin/df", "{param.x}"},
		{"/usr/bin/script", "-q", "{param.file}"},
		{"/usr/bin/fish", "/opt/a.fish", "{param.x}"},
	} {
		var p problems
		checkStrict(&p, "diagnostics[0]", argv)
		if p.err() == nil {
			t.Errorf("%v: accepted under catalog.strict", argv)
		}
	}
}

// catalog.strict accepts the embedded catalog and the README quick
// start's file, so turning it on breaks neither.
func TestCatalogStrictAcceptsShippedCatalogs(t *testing.T) {
	quick, err := os.ReadFile("../../docs/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, y := range map[string]string{
		"embedded defaults": "catalog: {strict: true}\n",
		"quick start":       string(quick) + "\ncatalog: {strict: true}\n",
	} {
		if strings.Contains(string(quick), "catalog:") {
			t.Fatal("quickstart.yaml has a catalog section; merge the key instead")
		}
		if _, err := Load([]byte(y), nil); err != nil {
			t.Errorf("%s under catalog.strict: %v", name, err)
		}
	}
}
