package config

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Diagnostics run as argv, never through a shell, so a task's value cannot
// become code. A catalog entry can still hand a value to an interpreter as
// part of its program ([/bin/sh, -c, "echo {param.x}"]): then "x; id" runs
// id. scriptArgs finds the arguments an interpreter runs as code, so
// validation can refuse a placeholder there; the value belongs in an
// argument of its own, which the script reads as data ("$1", sys.argv[1]).

// valuePlaceholder matches the placeholders a task fills in.
var valuePlaceholder = regexp.MustCompile(`\{(host|id|param\.[^{}]*)\}`)

// interpreter is how one family of interpreters takes a program inline.
type interpreter struct {
	// flags are the short options whose argument is the program: -c, -e.
	flags string
	// long are the long options whose argument is the program: --eval.
	long []string
	// withArg are the short options that take an argument: attached
	// ("-Mstrict") or, when nothing follows the letter, the next one.
	withArg string
	// shell: the program is the first operand after the options (POSIX
	// "sh -c [options] program [name [args]]") rather than the argument of
	// the flag itself.
	shell bool
	// attached: the program may follow its flag in the same argument
	// ("-cCODE").
	attached bool
	// once: the program ends the options; what follows is its arguments.
	once bool
	// stop are the short options after which the rest are arguments of
	// something else (python -m MODULE).
	stop string
	// readArg is how the program reads its first extra argument, for the
	// message.
	readArg string
	// argv0 fills $0 in the suggested command (shells only).
	argv0 string
	// split: env -S, which splits its argument into a command line.
	split bool
	// remote: ssh, whose arguments after the destination are joined into
	// one line that the remote shell runs.
	remote bool
	// firstOperand: without a program flag (and without noInline, a
	// program file), the first operand is the program (awk, sed).
	firstOperand bool
	// noInline are the short options that name a program file instead.
	noInline string
	// scriptFile: without an inline program, the first operand is the
	// script file the interpreter runs (sh FILE, python FILE): a program
	// position.
	scriptFile bool
	// progArg are the short options whose value names a script, module or
	// library the interpreter loads and runs (awk -f, python -m, node -r,
	// ruby -r, php -f, lua -l): program positions.
	progArg string
	// codeArg are the short options whose value becomes program text
	// (perl -M and -m turn their value into a `use` statement).
	codeArg string
}

var (
	shellFamily = interpreter{flags: "c", withArg: "oO", shell: true, scriptFile: true, readArg: `"$1"`, argv0: "sh"}
	// fish takes its program as the value of -c (and -C, run first).
	fishShell    = interpreter{flags: "cC", long: []string{"--command", "--init-command"}, withArg: "dDo", attached: true, scriptFile: true, readArg: "$argv[1]"}
	interpreters = map[string]interpreter{
		"sh": shellFamily, "bash": shellFamily, "dash": shellFamily, "zsh": shellFamily,
		"ksh": shellFamily, "mksh": shellFamily, "ash": shellFamily, "yash": shellFamily, "posh": shellFamily,
		"csh": shellFamily, "tcsh": shellFamily, "fish": fishShell,
		"python": {flags: "c", withArg: "WXQ", stop: "m", attached: true, once: true, scriptFile: true, readArg: "sys.argv[1]"},
		"perl":   {flags: "eE", withArg: "MmIxidDC", codeArg: "Mm", attached: true, scriptFile: true, readArg: "$ARGV[0]"},
		"ruby":   {flags: "e", withArg: "IrCEFxTWKi", progArg: "r", attached: true, scriptFile: true, readArg: "ARGV[0]"},
		"ssh":    {withArg: "BbcDEeFIiJLlmOopQRSWw", remote: true},
		"node":   {flags: "ep", long: []string{"--eval", "--print"}, withArg: "r", progArg: "r", once: true, scriptFile: true, readArg: "process.argv[1]"},
		"awk":    awkFamily, "gawk": awkFamily, "mawk": awkFamily, "nawk": awkFamily, "busybox-awk": awkFamily,
		"sed": {flags: "e", long: []string{"--expression"}, withArg: "fl", noInline: "f", progArg: "f", firstOperand: true, readArg: "a value in the input, not the script"},
		"php": {flags: "rBRE", withArg: "cdzf", progArg: "f", attached: true, scriptFile: true, readArg: "$argv[1]"},
		"lua": luaFamily, "luajit": luaFamily,
		"tclsh": {scriptFile: true, readArg: "[lindex $argv 0]"}, "wish": {scriptFile: true, readArg: "[lindex $argv 0]"},
		"Rscript": {flags: "e", attached: true, scriptFile: true, readArg: "commandArgs(TRUE)[1]"},
		"pwsh":    {flags: "cCeE", once: true, scriptFile: true, readArg: "$args[0]"},
	}
	luaFamily  = interpreter{flags: "e", withArg: "l", progArg: "l", attached: true, scriptFile: true, readArg: "arg[1]"}
	awkFamily  = interpreter{flags: "e", long: []string{"--source"}, withArg: "fvF", noInline: "f", progArg: "f", firstOperand: true, readArg: "ARGV[1] (or -v name=value)"}
	pythonName = regexp.MustCompile(`^python[0-9.]*$`)
	versioned  = regexp.MustCompile(`^(perl|ruby|lua|luajit|php|tclsh|wish|node)[0-9.]+$`)
)

// lookupInterpreter knows an interpreter by its program's base name.
func lookupInterpreter(name string) (interpreter, bool) {
	base := path.Base(name)
	if pythonName.MatchString(base) {
		base = "python"
	}
	if m := versioned.FindStringSubmatch(base); m != nil {
		base = m[1] // perl5.36, ruby3.2, lua5.4, php8.2, tclsh8.6
	}
	if base == "nodejs" {
		base = "node"
	}
	in, ok := interpreters[base]
	return in, ok
}

// wrapper is a program that runs a command given after its own options
// and operands (timeout 5s sh -c …).
type wrapper struct {
	withArg  string   // short options that take a value
	long     []string // long options that take a value (unless written --opt=value)
	operands int      // operands before the command (timeout's duration)
}

var wrappers = map[string]wrapper{
	"flock":   {withArg: "wEc", long: []string{"--timeout", "--conflict-exit-code", "--command"}, operands: 1},
	"xargs":   {withArg: "adEeIiLlnPs", long: []string{"--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-lines", "--replace"}},
	"sudo":    {withArg: "ugChpDrtTU", long: []string{"--user", "--group", "--close-from", "--host", "--prompt", "--chdir", "--role", "--type", "--command-timeout", "--other-user"}},
	"doas":    {withArg: "uC"},
	"chroot":  {long: []string{"--userspec", "--groups"}, operands: 1},
	"nsenter": {withArg: "tSGw", long: []string{"--target", "--setuid", "--setgid", "--wd"}},
	"ionice":  {withArg: "cnp", long: []string{"--class", "--classdata", "--pid"}},
	"busybox": {},
	"nohup":   {},
	"setsid":  {},
	"nice":    {withArg: "n", long: []string{"--adjustment"}},
	"timeout": {withArg: "sk", long: []string{"--signal", "--kill-after"}, operands: 1},
	"stdbuf":  {withArg: "ioe", long: []string{"--input", "--output", "--error"}},
}

// command returns where the wrapped command starts in argv, the wrapper's
// own arguments starting at i.
func (w wrapper) command(argv []string, i int) int {
	for ; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			return i + 1 + w.operands
		case strings.HasPrefix(a, "--"):
			if slices.Contains(w.long, a) {
				i++
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if j := strings.IndexAny(a[1:], w.withArg); j >= 0 && j+2 == len(a) {
				i++ // the value is the next argument
			}
		default:
			return i + w.operands
		}
	}
	return i
}

// scriptArgs returns the indexes of argv that an interpreter runs as code,
// those that name the script or module it runs, and the interpreter; env,
// busybox and the common wrappers (timeout, nice, nohup, setsid, stdbuf)
// in front of one are looked through.
func scriptArgs(argv []string) (code, files []int, in interpreter) {
	for start := 0; start < len(argv); {
		base := path.Base(argv[start])
		if base == "env" {
			next, split, _ := envCommand(argv, start+1)
			if split >= 0 {
				return []int{split}, nil, interpreter{split: true}
			}
			start = next
			continue
		}
		if w, ok := wrappers[base]; ok {
			start = w.command(argv, start+1)
			continue
		}
		in, ok := lookupInterpreter(argv[start])
		if !ok {
			return nil, nil, interpreter{}
		}
		code, files := in.programs(argv, start)
		return code, files, in
	}
	return nil, nil, interpreter{}
}

// envCommand skips env's options and NAME=VALUE assignments from i and
// returns where the command starts; split is the index of a -S string
// (which env splits into a command line of its own), else -1; argv0 the
// index of an -a/--argv0 value (the name the command runs under, which
// picks the program of a multi-call binary such as busybox), else -1.
func envCommand(argv []string, i int) (next, split, argv0 int) {
	argv0 = -1
	for ; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			return i + 1, -1, argv0
		case a == "-S" || a == "--split-string":
			return len(argv), i + 1, argv0
		case strings.HasPrefix(a, "--split-string=") || (strings.HasPrefix(a, "-S") && !strings.HasPrefix(a, "--")):
			return len(argv), i, argv0
		case a == "-a" || a == "--argv0":
			argv0 = i + 1
			i++
		case strings.HasPrefix(a, "--argv0=") || strings.HasPrefix(a, "-a") && !strings.HasPrefix(a, "--"):
			argv0 = i
		case a == "-u" || a == "-C" || a == "-P" || a == "--unset" || a == "--chdir":
			i++
		case strings.HasPrefix(a, "-"):
		case strings.Contains(a, "="):
		default:
			return i, -1, argv0
		}
	}
	return i, -1, argv0
}

// programs returns the indexes of the program arguments of the
// interpreter invoked at argv[start] (code: program text), and of the
// arguments that name a script, module or library it runs (files).
func (in interpreter) programs(argv []string, start int) (code, files []int) {
	inline, stdin := false, false
	i := start + 1
options:
	for ; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") && !(in.shell && strings.HasPrefix(a, "+")) || a == "-" {
			break
		}
		if strings.HasPrefix(a, "--") {
			for _, l := range in.long {
				if a == l {
					code = append(code, i+1)
					i++
					if in.once {
						return code, files
					}
					continue options
				}
				if strings.HasPrefix(a, l+"=") {
					code = append(code, i)
					if in.once {
						return code, files
					}
					continue options
				}
			}
			continue
		}
		program, skip := false, false
	cluster:
		for j := 1; j < len(a); j++ {
			c := a[j]
			// The value of an option: the rest of this argument, or the
			// next one.
			value := i
			if j+1 == len(a) {
				value = i + 1
			}
			switch {
			case strings.IndexByte(in.flags, c) >= 0 && in.shell:
				inline = true
			case strings.IndexByte(in.flags, c) >= 0 && in.attached && j+1 < len(a):
				code = append(code, i) // -cCODE
				if in.once {
					return code, files
				}
				continue options
			case strings.IndexByte(in.flags, c) >= 0:
				program = true
			case strings.IndexByte(in.stop, c) >= 0:
				// python -m MODULE: the module is the program, and what
				// follows is its arguments.
				return code, append(files, value)
			case strings.IndexByte(in.withArg, c) >= 0:
				if strings.IndexByte(in.progArg, c) >= 0 {
					files = append(files, value)
				}
				if strings.IndexByte(in.codeArg, c) >= 0 {
					code = append(code, value)
				}
				skip = j+1 == len(a)
				break cluster
			case in.shell && c == 's':
				stdin = true // sh -s: the program is read from stdin
			}
		}
		if program && i+1 < len(argv) {
			i++
			code = append(code, i)
			if in.once {
				return code, files
			}
		}
		if skip {
			i++
		}
	}
	if in.shell && inline && i < len(argv) {
		code = append(code, i)
	}
	if in.firstOperand && len(code) == 0 && !noInline(argv[start+1:min(i, len(argv))], in.noInline) && i < len(argv) {
		code = append(code, i)
	}
	if in.scriptFile && len(code) == 0 && !inline && !stdin && i < len(argv) {
		files = append(files, i) // sh FILE, python FILE
	}
	if in.remote {
		for j := i + 1; j < len(argv); j++ {
			code = append(code, j)
		}
	}
	return code, files
}

// noInline reports whether options name a program file (awk -f, sed -f).
func noInline(opts []string, letters string) bool {
	if letters == "" {
		return false
	}
	for _, a := range opts {
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a[1:], letters) {
			return true
		}
	}
	return false
}

// findExec is where the command of find's -exec, -execdir, -ok or -okdir
// starts and ends (at ";" or "+"), or -1.
func findExec(argv []string, start int) (from, to int) {
	for i := start + 1; i < len(argv); i++ {
		switch argv[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
			for j := i + 1; j < len(argv); j++ {
				if argv[j] == ";" || argv[j] == "+" {
					return i + 1, j
				}
			}
			return i + 1, len(argv)
		}
	}
	return -1, -1
}

// checkPrograms refuses a placeholder in a program position: argv[0], and
// the command that env, a known wrapper or find -exec runs. A task would
// choose the program there; the catalog names every program. It is a
// deny-list of known wrappers: an unknown one is not looked through.
func checkPrograms(p *problems, key string, argv []string, offset int) {
	for start := 0; start < len(argv); {
		if ph := valuePlaceholder.FindString(argv[start]); ph != "" {
			p.addf(fmt.Sprintf("%s.command[%d]", key, offset+start),
				"%s is in a program position (the program %s runs): a task would choose the program; name it in the catalog and pass values as arguments",
				ph, programOf(argv, start))
			return
		}
		base := path.Base(argv[start])
		if base == "env" {
			next, split, argv0 := envCommand(argv, start+1)
			if argv0 >= 0 && argv0 < len(argv) {
				if ph := valuePlaceholder.FindString(argv[argv0]); ph != "" {
					p.addf(fmt.Sprintf("%s.command[%d]", key, offset+argv0),
						"%s is the name env -a gives the command, which picks the program of a multi-call binary (busybox): a task would choose the program; name it in the catalog", ph)
					return
				}
			}
			if split >= 0 {
				return
			}
			start = next
			continue
		}
		if w, ok := wrappers[base]; ok {
			next := w.command(argv, start+1)
			if checkCommandOptions(p, key, argv[:next], start, offset) {
				return
			}
			start = next
			if base == "flock" && start < len(argv) && (argv[start] == "-c" || argv[start] == "--command") {
				// flock FILE -c COMMAND: the shell runs COMMAND.
				checkShellLine(p, key, argv, start+1, offset, "flock -c")
				return
			}
			continue
		}
		checkCommandOptions(p, key, argv, start, offset)
		if base == "find" {
			if from, to := findExec(argv, start); from >= 0 {
				checkPrograms(p, key, argv[from:to], offset+from)
				checkScriptsAt(p, key, argv[from:to], offset+from)
			}
		}
		return
	}
}

func programOf(argv []string, i int) string {
	if i == 0 {
		return "the diagnostic"
	}
	return argv[0]
}

// checkScripts reports a placeholder in a program position or inside an
// interpreter's program.
func checkScripts(p *problems, key string, argv []string) {
	checkPrograms(p, key, argv, 0)
	checkScriptsAt(p, key, argv, 0)
}

func checkScriptsAt(p *problems, key string, argv []string, offset int) {
	idx, files, in := scriptArgs(argv)
	for _, i := range files {
		if i >= len(argv) {
			continue
		}
		if ph := valuePlaceholder.FindString(argv[i]); ph != "" {
			p.addf(fmt.Sprintf("%s.command[%d]", key, offset+i),
				"%s names the script, module or library that %s runs: a task would choose the program; "+
					"name the script in the catalog and pass the value as an argument of its own after it, read as %s", ph, argv[0], in.readArg)
		}
	}
	for _, i := range idx {
		if i >= len(argv) {
			continue
		}
		ph := valuePlaceholder.FindString(argv[i])
		if ph == "" {
			continue
		}
		if in.remote {
			p.addf(fmt.Sprintf("%s.command[%d]", key, offset+i),
				"%s is in the command that %s joins into one line for the remote shell, so a value such as \"x; id\" would run as code there, "+
					"and no argument after the destination is passed as data; run a fixed remote command instead", ph, argv[0])
			continue
		}
		if in.split {
			p.addf(fmt.Sprintf("%s.command[%d]", key, offset+i),
				"%s is inside the string that env -S splits into a command line, so a value with spaces becomes arguments or code; "+
					"name the program and its arguments directly, each placeholder an argument of its own", ph)
			continue
		}
		p.add(fmt.Sprintf("%s.command[%d]", key, offset+i), fmt.Errorf(
			"%s is inside the program that %s runs, so a value such as \"x; id\" would run as code; "+
				"pass it as an argument of its own and read it as %s, e.g. %s",
			ph, argv[0], in.readArg, suggestion(argv, i, in, ph)))
	}
}

// suggestion rewrites argv so the placeholder at argv[i] becomes its own
// argument after the program.
func suggestion(argv []string, i int, in interpreter, ph string) string {
	out := make([]string, 0, len(argv)+2)
	for j, a := range argv[:i+1] {
		if j == i {
			a = strings.ReplaceAll(a, ph, in.readArg)
		}
		out = append(out, a)
	}
	if in.argv0 != "" {
		out = append(out, in.argv0)
	}
	out = append(out, ph)
	for j, a := range out {
		if strings.ContainsAny(a, " ,[]{}\"$;#:") {
			out[j] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// CatalogConfig is the catalog section of the configuration.
type CatalogConfig struct {
	// Strict turns the deny-list of program positions and interpreters
	// into an allow-list: a placeholder may stand only in the arguments of
	// a program that is neither a known interpreter or script-taking tool
	// nor a known wrapper (env, timeout, sudo, find, …).
	Strict bool `yaml:"strict"`
}

// checkStrict refuses, under catalog.strict, any placeholder in the argv
// of a program that runs other programs or program text.
func checkStrict(p *problems, key string, argv []string) {
	if len(argv) == 0 {
		return
	}
	base := path.Base(argv[0])
	_, wraps := wrappers[base]
	_, interprets := lookupInterpreter(argv[0])
	_, runs := commandOptions[base]
	if !wraps && !interprets && !runs && base != "env" && base != "find" {
		return
	}
	for i, a := range argv {
		if ph := valuePlaceholder.FindString(a); ph != "" {
			p.addf(fmt.Sprintf("%s.command[%d]", key, i),
				"%s: catalog.strict allows placeholders only in arguments of programs that run no other program or program text, and %s does",
				ph, base)
			return
		}
	}
}
