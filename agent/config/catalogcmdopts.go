package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Some programs that are not interpreters still run a command or program
// named in one of their options: ssh -o ProxyCommand=…, tar
// --to-command=…, sort --compress-program=…, git -c core.pager=…, script
// -c …; watch runs its operands as a shell line. A placeholder in such a
// value would let a task choose what runs, so the catalog check refuses
// it, as it refuses one in an interpreter's program. Like the rest of the
// check this is a list of known programs: catalog.strict is the way to be
// sure.

// commandOpts is how one program takes a command in its options.
type commandOpts struct {
	// withArg are the short options that take a value.
	withArg string
	// longArg are the long options that take a value (unless --opt=value).
	longArg []string
	// cmdShort are the short options whose value runs as a command or
	// names the program run.
	cmdShort string
	// cmdLong are the long options whose value runs as a command or names
	// the program run; an unambiguous prefix (--to-comm=) counts too.
	cmdLong []string
	// toOperand: the program's own options end at its first operand (git's
	// subcommand, ssh's destination).
	toOperand bool
	// runs reports, for a value holding a placeholder, whether it runs as
	// a command (ssh -o: only some options do); nil: every value does.
	runs func(value string) bool
	// shellOperands: the operands are joined into one shell line (watch,
	// unless -x/--exec).
	shellOperands bool
}

var commandOptions = map[string]commandOpts{
	"ssh":  {withArg: "BbcDEeFIiJLlmOopQRSWw", cmdShort: "o", toOperand: true, runs: sshRunsCommand},
	"scp":  {withArg: "cDFiJlOoPSX", cmdShort: "oS", toOperand: false, runs: nil},
	"sftp": {withArg: "BbcDFiJlOoPRSsX", cmdShort: "oSD", toOperand: true, runs: nil},
	"tar": {withArg: "bCfFgHIKLNTVX",
		longArg:  []string{"--file", "--directory", "--exclude", "--files-from", "--owner", "--group", "--mode", "--transform", "--blocking-factor", "--tape-length", "--newer", "--after-date", "--label", "--format", "--volno-file"},
		cmdShort: "IF",
		cmdLong:  []string{"--to-command", "--use-compress-program", "--rsh-command", "--info-script", "--new-volume-script", "--checkpoint-action"}},
	"sort": {withArg: "kotST", longArg: []string{"--key", "--output", "--field-separator", "--buffer-size", "--temporary-directory", "--files0-from", "--parallel", "--batch-size", "--sort", "--random-source"},
		cmdLong: []string{"--compress-program"}},
	"git": {withArg: "cC", longArg: []string{"--git-dir", "--work-tree", "--namespace", "--super-prefix"},
		cmdShort: "c", cmdLong: []string{"--config-env", "--exec-path"}, toOperand: true},
	"script": {withArg: "cEIOBTm", longArg: []string{"--echo", "--log-in", "--log-out", "--log-io", "--log-timing", "--logging-format", "--output-limit"},
		cmdShort: "c", cmdLong: []string{"--command"}},
	"watch": {withArg: "nq", longArg: []string{"--interval", "--equexit"}, shellOperands: true},
	"rsync": {withArg: "eBfT", cmdShort: "e", cmdLong: []string{"--rsh", "--rsync-path"}},
}

// sshCommandOptions are the ssh_config keywords whose value runs as a
// command (locally, or on the remote side for RemoteCommand).
var sshCommandOptions = []string{"proxycommand", "localcommand", "knownhostscommand", "remotecommand", "match", "permitlocalcommand"}

// sshRunsCommand: an -o value whose keyword holds the placeholder (the
// task picks the option), or whose keyword runs a command.
func sshRunsCommand(v string) bool {
	name, _, _ := strings.Cut(strings.TrimSpace(v), "=")
	name, _, _ = strings.Cut(name, " ")
	name, _, _ = strings.Cut(name, "\t")
	if valuePlaceholder.MatchString(name) {
		return true
	}
	return slices.Contains(sshCommandOptions, strings.ToLower(name))
}

// checkCommandOptions refuses a placeholder in a value of argv[start]'s
// options that runs as a command; it reports whether it refused one.
func checkCommandOptions(p *problems, key string, argv []string, start, offset int) bool {
	base := path.Base(argv[start])
	spec, ok := commandOptions[base]
	if !ok {
		return false
	}
	exec := false // watch -x: the operands are an argv, not a shell line
	for i := start + 1; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			return spec.shellOperands && checkShellOperands(p, key, argv, i+1, offset, base, exec)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if spec.shellOperands {
				return checkShellOperands(p, key, argv, i, offset, base, exec)
			}
			if spec.toOperand {
				return false
			}
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, val, attached := strings.Cut(a, "=")
			if name == "--exec" {
				exec = true
				continue
			}
			if longCommand(name, spec.cmdLong) {
				idx := i
				if !attached {
					idx, val = i+1, ""
					if idx < len(argv) {
						val = argv[idx]
					}
				}
				if refuseOption(p, key, argv, idx, val, offset, base, name, spec.runs) {
					return true
				}
				if !attached {
					i++
				}
				continue
			}
			if !attached && slices.Contains(spec.longArg, name) {
				i++
			}
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if c == 'x' && base == "watch" {
				exec = true
			}
			cmd := strings.IndexByte(spec.cmdShort, c) >= 0
			if !cmd && strings.IndexByte(spec.withArg, c) < 0 {
				continue
			}
			idx, val := i, a[j+1:]
			if j+1 == len(a) {
				idx, val = i+1, ""
				if idx < len(argv) {
					val = argv[idx]
				}
				i++
			}
			if cmd && refuseOption(p, key, argv, idx, val, offset, base, "-"+string(c), spec.runs) {
				return true
			}
			break
		}
	}
	return false
}

// longCommand: name is one of the command options or an unambiguous
// abbreviation of one (getopt_long takes any prefix).
func longCommand(name string, opts []string) bool {
	if len(name) < 4 {
		return false
	}
	for _, o := range opts {
		if strings.HasPrefix(o, name) {
			return true
		}
	}
	return false
}

func refuseOption(p *problems, key string, argv []string, idx int, val string, offset int, prog, opt string, runs func(string) bool) bool {
	ph := valuePlaceholder.FindString(val)
	if ph == "" || runs != nil && !runs(val) {
		return false
	}
	p.addf(fmt.Sprintf("%s.command[%d]", key, offset+idx),
		"%s is in the value of %s %s, which runs as a command or names the program run, so a value such as \"x; id\" would run; "+
			"put the fixed command in the catalog and the value elsewhere, or set catalog.strict", ph, prog, opt)
	return true
}

// checkShellOperands: watch joins its operands into one line for sh -c
// (with -x it runs them as an argv, whose first is the program).
func checkShellOperands(p *problems, key string, argv []string, from, offset int, prog string, exec bool) bool {
	if exec {
		if from < len(argv) {
			if ph := valuePlaceholder.FindString(argv[from]); ph != "" {
				p.addf(fmt.Sprintf("%s.command[%d]", key, offset+from),
					"%s is in a program position (the program %s -x runs): a task would choose the program; name it in the catalog", ph, prog)
				return true
			}
		}
		return false
	}
	return checkShellLine(p, key, argv, from, offset, prog)
}

// checkShellLine refuses a placeholder in argv[from:], which a program
// joins into one line for a shell (flock -c, watch).
func checkShellLine(p *problems, key string, argv []string, from, offset int, what string) bool {
	for i := from; i < len(argv); i++ {
		if ph := valuePlaceholder.FindString(argv[i]); ph != "" {
			p.addf(fmt.Sprintf("%s.command[%d]", key, offset+i),
				"%s is in the command line that %s hands to a shell, so a value such as \"x; id\" would run as code; "+
					"run a fixed command, or a script that reads the value as \"$1\"", ph, what)
			return true
		}
	}
	return false
}
