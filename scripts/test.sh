#!/usr/bin/env bash
# scripts/test.sh — the one command that runs every test of autodiag.
#
# It installs what is missing (Debian's redis-server and, for promtool,
# prometheus; the pinned amazon-ec2-metadata-mock and golangci-lint, which
# have no Debian package, built once per machine into the tools cache and
# linked into .tmp/bin), starts a redis-server and a 3-master Redis
# Cluster on free loopback ports, exports their addresses to the tests,
# runs gofmt, golangci-lint (.golangci.yml; go vet's analyzers among its
# own), promtool on the Prometheus rules in deploy/prometheus and go test
# -race over the whole module, and stops everything it started, whatever
# happens.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./limiter/...   # only these packages (same services)
#   AUTODIAG_TEST_RUN='TestLaunch' scripts/test.sh ./cmd/autodiag/
#                                   # only the tests matching go test -run
#
# Environment read:
#   AUTODIAG_TEST_RUN                  go test -run pattern (default: every test)
#   AUTODIAG_TOOLS_CACHE               where built tools are kept across clones
#                                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/autodiag-tools)
#
# Environment given to the tests:
#   AUTODIAG_TEST_REDIS_ADDR           host:port of a single redis-server
#   AUTODIAG_TEST_REDIS_CLUSTER_ADDRS  comma-separated seeds of the cluster
#   AUTODIAG_TEST_EC2_METADATA_MOCK    path of the ec2-metadata-mock binary
#   AUTODIAG_TF_PLUGIN_DIR             offline Terraform providers, when present
#   AUTODIAG_TEST_BUILD_LOCK           held while the agent and ec2-metadata-mock
#                                      build in the background (testenv.WaitForBuilds)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/autodiag-test.XXXXXX")
bin=$root/.tmp/bin
mkdir -p "$bin"
export PATH=$bin:$PATH

IMDS_MOCK_VERSION=v1.13.0
GOLANGCI_LINT_VERSION=v2.15.0

log() { printf 'test.sh: %s\n' "$*" >&2; }

# cpu_now: sets cpu to the CPU time (user + system) of every child this
# shell has waited for, compilers and test binaries included, in whole
# seconds. Wall time under another job's load says little; CPU time carries
# over to an idle machine (about CPU / 2 on two cores). `times` must run in
# this shell (a pipe or $(…) forks, and a fork counts none of this shell's
# children), so its lines go through a file.
cpu=0
cpu_now() {
	times >"$work/times"
	cpu=$(bash "$root/scripts/cpu-seconds" "$work/times")
}

# phase NAME: logs the time the previous phase took and starts NAME; the
# last line sums them up (wall and CPU seconds), so a slow first run says
# where its minutes went. With AUTODIAG_PHASES_FILE set, the sum is also
# written there, for .ci/run's closing line.
phase_name="" phase_start=$SECONDS phase_cpu=0 phases=""
phase() {
	cpu_now
	if [[ -n $phase_name ]]; then
		phases+="${phases:+, }$phase_name $((SECONDS - phase_start))s (cpu $((cpu - phase_cpu))s)"
	fi
	phase_name=$1 phase_start=$SECONDS phase_cpu=$cpu
	[[ -z $1 ]] || log "$1"
}

builds_pid=""
e2e_pid="" e2e_start=""
redis_pid=""
cluster_base=""
cluster_dir=""
cleanup() {
	local rc=$?
	# The background builds or lint still running (an early failure):
	# stopped with their go command, not left behind.
	if [[ -n $builds_pid ]]; then
		pkill -TERM -P "$builds_pid" 2>/dev/null || true
		kill "$builds_pid" 2>/dev/null || true
	fi
	# cmd/autodiag's test binary still running beside go test: stopped
	# (scripts/testexec passes the signal on).
	[[ -z $e2e_pid ]] || kill "$e2e_pid" 2>/dev/null || true
	if [[ -n $redis_pid ]]; then
		redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || kill "$redis_pid" 2>/dev/null || true
	fi
	if [[ -n $cluster_base ]]; then
		bash scripts/redis-cluster.sh stop "$cluster_base" "$cluster_dir" >/dev/null 2>&1 || true
	fi
	phase ""
	rm -rf "$work"
	log "$([[ $rc -eq 0 ]] && echo ok || echo "FAIL (exit $rc)") after ${SECONDS}s (cpu ${cpu}s): $phases"
	[[ -z ${AUTODIAG_PHASES_FILE:-} ]] || printf '%s\n' "$phases" >"$AUTODIAG_PHASES_FILE" 2>/dev/null || true
	exit $rc
}
trap cleanup EXIT INT TERM

# --- what the tests need -----------------------------------------------------
# install_deb PACKAGE COMMAND...: installs the Debian package when one of the
# commands is missing. Prebuilt tools from the distribution, not source
# builds: promtool alone is the whole of Prometheus to compile.
# .ci/run runs scripts/release-check beside this script, and it installs
# rpm the same way: apt-get runs under one lock file (flock), so the two
# wait for each other instead of failing on dpkg's lock.
apt_updated=""
install_deb() {
	local pkg=$1 c missing=""
	shift
	for c in "$@"; do
		command -v "$c" >/dev/null || missing+=" $c"
	done
	[[ -n $missing ]] || return 0
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
		log "missing:$missing; run as root, or: apt-get install -y --no-install-recommends $pkg"
		exit 1
	fi
	log "installing $pkg (Debian package) for$missing"
	if [[ -z $apt_updated ]]; then
		flock "${TMPDIR:-/tmp}/autodiag-apt.lock" apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive flock "${TMPDIR:-/tmp}/autodiag-apt.lock" apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
}
# install_tool NAME VERSION PACKAGE: puts the pinned tool into $bin.
# Tools are built from source through the module proxy (the only registry a
# machine here reaches: no release binaries), which takes minutes for
# golangci-lint. So each build is kept outside the clone, in the tools
# cache under the tool's version and the Go toolchain that built it (a
# golangci-lint built by an older Go refuses a module that needs a newer
# one), and a fresh clone on the same machine links it instead of building
# again. A lock makes concurrent runs wait for one build. Without a usable
# cache the tool is built into $bin.
tools_cache=${AUTODIAG_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/autodiag-tools}
go_version=$(go env GOVERSION)
# Tools are built with the release's settings (.goreleaser.yaml:
# CGO_ENABLED=0, -trimpath, -gcflags=all=-dwarf=false), as are the e2e
# tests' agent (internal/harness Build) and scripts/release-check's
# builds: the Go build cache keys a compile on them, so the standard
# library and any module at the same version are compiled once for all
# of them on a fresh machine, not once per setting.
release_go() { CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath -gcflags=all=-dwarf=false" go "$@"; }
# The tools are compiled without inlining as well (-l), except the
# standard library (std=-dwarf=false: the release's flags, so its compile
# stays the one shared with the agent's build), and linked without a
# symbol table or DWARF (-s -w). On a cache holding only the standard
# library, golangci-lint's build took 239 CPU s (user + sys) with no
# flags, 181 with -l and 157 with -l, -dwarf=false and -s -w; its run
# over the module did not measurably slow with -l (53-73 CPU s either way,
# three runs each, warm build cache, empty lint cache): a cold CI run is
# CPU-bound on 2 cores (issue 44). -N as well saved nothing more.
tool_flags=('-gcflags=all=-l -dwarf=false' -gcflags=std=-dwarf=false '-ldflags=-s -w')
install_tool() {
	local name=$1 version=$2 pkg=$3
	local key="$version $go_version"
	if [[ -x $bin/$name && $(cat "$bin/.$name.version" 2>/dev/null) == "$key" ]]; then
		return 0
	fi
	local dir=$tools_cache/$name-$version-$go_version
	if ! mkdir -p "$tools_cache" 2>/dev/null || [[ ! -w $tools_cache ]]; then
		log "installing $name $version into $bin (no tools cache at $tools_cache)"
		GOBIN=$bin release_go install "${tool_flags[@]}" "$pkg@$version"
		echo "$key" >"$bin/.$name.version"
		return 0
	fi
	(
		if command -v flock >/dev/null; then
			exec 8>"$tools_cache/.$name.lock"
			flock 8
		fi
		if [[ ! -x $dir/$name ]]; then
			log "building $name $version with $go_version into $dir (from source: minutes)"
			# Into a private directory first: a run stopped halfway leaves
			# no binary that a later run would take for a complete one.
			local partial
			partial=$(mktemp -d "$tools_cache/.partial.XXXXXX")
			GOBIN=$partial release_go install "${tool_flags[@]}" "$pkg@$version" || { rm -rf "$partial"; exit 1; }
			mkdir -p "$dir"
			mv -f "$partial/$name" "$dir/$name"
			rmdir "$partial"
		fi
	)
	log "$name $version from $dir"
	rm -f "$bin/$name"
	ln "$dir/$name" "$bin/$name" 2>/dev/null || cp -p "$dir/$name" "$bin/$name"
	echo "$key" >"$bin/.$name.version"
}
# The background builds. A fresh machine compiles three things besides the
# module's race build for the tests: the end-to-end tests' agent with the
# release's settings (internal/harness Build), ec2-metadata-mock and
# golangci-lint (built from source: no package ships it). They do not
# depend on the tests' compile, so one job builds them, in that order,
# from this script's first second: beside the apt install, the module
# download, the services and go test's own compile, filling the cores
# their serial stretches (downloads, links, the largest packages) leave
# idle. One job, not three: two go commands compiling the same packages at
# the same time both compile them (the build cache shares only what is
# finished), so the standard library is compiled once, by the agent's
# build, and the two tools take it from the cache.
#
# The tests that need the first two wait for them on a lock
# (internal/testenv WaitForBuilds, by AUTODIAG_TEST_BUILD_LOCK): the job
# holds it until the agent and the mock are built, or until it ends,
# whatever its outcome. .ci/run opens the lock before it starts the
# release check (which waits on it too, so the agent is compiled once for
# both) and hands it here on descriptor 9; run alone, this script takes
# its own.
pkgs=("$@")
# The whole module. ./cmd/autodiag, whose run is the longest (the
# end-to-end tests), is compiled first and runs beside go test (below).
[[ ${#pkgs[@]} -gt 0 ]] || pkgs=(./...)
agent_build=""
for p in "${@:-./...}"; do
	[[ $p != ./... && $p != ./cmd* ]] || agent_build=1
done
if [[ -z ${AUTODIAG_TEST_BUILD_LOCK:-} || -z ${AUTODIAG_BUILD_LOCK_FD9:-} ]] || ! { true >&9; } 2>/dev/null; then
	export AUTODIAG_TEST_BUILD_LOCK=$work/builds.lock
	exec 9>"$AUTODIAG_TEST_BUILD_LOCK"
	flock 9
fi
unset AUTODIAG_BUILD_LOCK_FD9
# job_cpu: the CPU seconds of the background job's children so far, from
# its last `times` (in $work/builds.times).
job_cpu() {
	bash "$root/scripts/cpu-seconds" "$work/builds.times"
}
# run_lint: golangci-lint over the packages tested, with -race in GOFLAGS:
# it compiles each dependency for its export data (go list -export), and
# with the tests' flags it shares their compile (without -race it would
# compile the module and its dependencies a second time: a fifth of a
# cold run on 2 cores); it then checks the race build's files
# (race_on_test.go, not race_off_test.go: a constant each). Its govet
# runs go vet's analyzers (.golangci.yml: the standard set), which is why
# there is no separate go vet, nor go test's own vet step (-vet=off).
# Several worktrees share this machine and its lint cache (safe for
# concurrent use, like the Go build cache): run beside them, not after.
lint_bin=golangci-lint
# race_flags: the tests' build flags, which run_lint passes in GOFLAGS so
# that the two share one compile (so: one flag per word, no spaces).
# -gcflags=all=-dwarf=false: the compiler writes no DWARF tables, which
# nothing here reads (the test binaries are linked with -w, which drops
# them; a panic's or a race report's stack comes from the runtime's own
# tables). Cold, the compile and link of every test binary took 396 CPU s
# instead of 451 (user + sys; go test -race -vet=off -ldflags=-w -p 2
# -exec /bin/true ./... on an empty GOCACHE, with and without the flag;
# issue 44). The instructions are the same: go build -gcflags=-S of
# agent/redact lists every function alike either way (with DWARF the
# compiler also emits four type-equality functions, marked DUPOK). Not -l
# as well (a further 75 CPU s): the tests would run code compiled unlike
# the code shipped, and golangci-lint could not share its compile (GOFLAGS
# holds no flag value with a space).
race_flags=(-race -gcflags=all=-dwarf=false)
run_lint() {
	GOFLAGS="${GOFLAGS:+$GOFLAGS }${race_flags[*]}" nice -n "${1:-0}" "$lint_bin" run --allow-parallel-runners "${pkgs[@]}"
}
build_agent() {
	log "building the e2e tests' agent (release settings) in the background"
	CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags='-s -w' -o "$work/autodiag-e2e" ./cmd/autodiag ||
		{ log "building the e2e tests' agent failed"; exit 1; }
	rm -f "$work/autodiag-e2e"
}
# Where lint runs. Beside the tests, at a lower priority, once
# golangci-lint is ready (the end of this job): the tests leave a core
# idle for much of their run (they wait on agents, servers and timers).
# Before them only when golangci-lint is already built and the Go build
# cache is empty: beside go test's compile, lint would compile the same
# race build a second time at the same moment.
lint_beside=1
if [[ -x $tools_cache/golangci-lint-$GOLANGCI_LINT_VERSION-$go_version/golangci-lint &&
	-z $(ls -A "$(go env GOCACHE)" 2>/dev/null) ]]; then
	lint_beside="" lint_bin=$tools_cache/golangci-lint-$GOLANGCI_LINT_VERSION-$go_version/golangci-lint
fi
(
	# The lock is released however this job ends: a failed build must not
	# leave the tests waiting until go test's timeout.
	trap 'flock -u 9' EXIT
	# One compile at a time here (-p=1), for the builds and for lint's
	# compiles: go test compiles two at once beside this job, and more
	# compiles than cores cost CPU, not only waiting. On an idle 2-core
	# machine every test binary's race build took 463 CPU s with -p 4
	# against 396 with -p 2 (issue 44).
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-p=1"
	t0=$SECONDS
	[[ -z $agent_build ]] || build_agent
	install_tool ec2-metadata-mock "$IMDS_MOCK_VERSION" github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock
	flock -u 9
	times >"$work/builds.times"
	log "background builds: $([[ -z $agent_build ]] || echo "the e2e agent and ")ec2-metadata-mock ready after $((SECONDS - t0))s (cpu $(job_cpu)s)"
	t0=$SECONDS
	install_tool golangci-lint "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	times >"$work/builds.times"
	log "background builds: golangci-lint ready after $((SECONDS - t0))s more (cpu $(job_cpu)s in all)"
	[[ -n $lint_beside ]] || exit 0
	cpu0=$(job_cpu) t0=$SECONDS rc=0
	run_lint 10 >"$work/lint.log" 2>&1 || rc=$?
	times >"$work/builds.times"
	echo "golangci-lint: exit $rc after $((SECONDS - t0))s (cpu $(($(job_cpu) - cpu0))s), beside the tests" >>"$work/lint.log"
	exit "$rc"
) &
builds_pid=$!
# This shell's descriptor 9 is closed (the job keeps the lock): the
# services and go test started below do not inherit it.
exec 9>&-

phase "apt (redis-server, prometheus)"
install_deb redis-server redis-server redis-cli
install_deb prometheus promtool

# The module's own dependencies, in a phase of their own: on a fresh
# machine the download is network time, not build time.
phase "go mod download"
go mod download

# free_port: a loopback port nothing listens on (and, for a cluster base,
# the next two and their +10000 bus ports as well), all below the kernel's
# ephemeral range: outgoing connections take their local ports from that
# range, and a port one of them holds cannot be bound though nothing
# listens on it (a cluster node whose bus port was such a port never came
# up). A cluster base is then below 22768 on Linux's default range.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local span=${1:-1} p i ok top
	top=$((ephemeral_low - span - 10000))
	((span > 1)) || top=$((ephemeral_low - span))
	((top > 20100)) || top=40000 # an unusual range: as before
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % (top - 20000)))
		ok=1
		for ((i = 0; i < span; i++)); do
			port_free $((p + i)) && port_free $((p + i + 10000)) || ok=0
		done
		((ok)) && { echo "$p"; return 0; }
	done
	log "no free port found"
	return 1
}

# --- services ------------------------------------------------------------------
phase "services"
# A port found free can be taken before the server binds it (other clones
# on this machine pick from the same range): a server that did not come up,
# or a port where another process's server answers, means another port.
redis_port=""
for attempt in 1 2 3; do
	port=$(free_port 1)
	rm -f "$work/redis.pid"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$work" --logfile "$work/redis.log" --pidfile "$work/redis.pid" --daemonize yes || true
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && [[ -s $work/redis.pid ]] && break
		sleep 0.1
	done
	pid=$(cat "$work/redis.pid" 2>/dev/null || true)
	if [[ -n $pid ]] && redis-cli -p "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"; then
		redis_port=$port redis_pid=$pid
		break
	fi
	[[ -z $pid ]] || kill "$pid" 2>/dev/null || true
	log "redis-server did not come up on port $port (attempt $attempt)"
	cat "$work/redis.log" >&2 2>/dev/null || true
done
[[ -n $redis_port ]] || { log "redis-server did not start"; exit 1; }
export AUTODIAG_TEST_REDIS_ADDR=127.0.0.1:$redis_port
log "redis-server on $AUTODIAG_TEST_REDIS_ADDR"

for attempt in 1 2 3; do
	base=$(free_port 3)
	dir=$work/cluster-$attempt
	mkdir -p "$dir"
	if AUTODIAG_TEST_REDIS_CLUSTER_ADDRS=$(bash scripts/redis-cluster.sh start "$base" "$dir"); then
		cluster_base=$base cluster_dir=$dir
		break
	fi
	# Only the nodes this run started, by their pid files: a port that was
	# taken may hold another run's node.
	for f in "$dir"/*/redis.pid; do
		[[ -s $f ]] && kill "$(cat "$f")" 2>/dev/null || true
	done
	log "redis cluster did not come up on ports $base.. (attempt $attempt)"
done
[[ -n $cluster_base ]] || { log "redis cluster did not start"; exit 1; }
export AUTODIAG_TEST_REDIS_CLUSTER_ADDRS
log "redis cluster on $AUTODIAG_TEST_REDIS_CLUSTER_ADDRS"

export AUTODIAG_TEST_EC2_METADATA_MOCK=$bin/ec2-metadata-mock
if [[ -d /opt/tf-plugins && -z ${AUTODIAG_TF_PLUGIN_DIR:-} ]]; then
	export AUTODIAG_TF_PLUGIN_DIR=/opt/tf-plugins
fi

# --- checks --------------------------------------------------------------------

phase "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tmp/*'))
if [[ -n $unformatted ]]; then
	log "gofmt would change:"
	echo "$unformatted" >&2
	exit 1
fi
# Seconds, whatever packages were asked for: the rules are not Go, so no
# package pattern selects them.
log "promtool: $(promtool --version 2>&1 | head -1)"
phase "promtool check rules, test rules"
promtool check rules deploy/prometheus/autodiag-rules.yml
promtool test rules deploy/prometheus/autodiag-rules_test.yml
if [[ -z $lint_beside ]]; then
	phase "golangci-lint run (GOFLAGS -race) ${pkgs[*]}"
	run_lint
fi
# A fresh machine compiles the module and its dependencies here (minutes):
# say so before the silence.
if [[ -z $(ls -A "$(go env GOCACHE)" 2>/dev/null) ]]; then
	log "empty Go build cache: go test -race compiles every dependency first (minutes on 2 cores)"
fi
phase "go test -race ${pkgs[*]}${lint_beside:+ (golangci-lint beside it, once built)}"
# Two cores: at most two test binaries at once.
run=()
[[ -z ${AUTODIAG_TEST_RUN:-} ]] || run=(-run "$AUTODIAG_TEST_RUN")
# scripts/testexec times each package's run, so the closing line can set
# the tests' own run against the compile and link of their binaries.
export AUTODIAG_TEST_RUNS=$work/test-runs
: >"$AUTODIAG_TEST_RUNS"
test_rc=0
# -vet=off: golangci-lint's govet runs every analyzer go test's own vet
# step would (a subset of vet's defaults) on the same packages and files;
# run here too they are tens of CPU seconds on a fresh machine for nothing.
# -ldflags=-w: the test binaries are linked without DWARF, which nothing
# here reads (a panic's or a race report's stack comes from the runtime's
# own tables): the race link of ./agent's tests takes 3.8 CPU s instead
# of 4.9, and each of the 48 packages with tests links one. The compiles,
# shared with golangci-lint, do not change.
go_test() {
	go test "${race_flags[@]}" -vet=off -ldflags=-w -p 2 -timeout 20m "$@"
}
# ./cmd/autodiag's end-to-end tests run beside go test, not in one of its
# two slots: their run is the longest (~260 s, a third of it CPU: they
# wait on agents, servers and timers), and while it held a slot, every
# other package's compile, link and run took the other one, one at a
# time, so go test ended ~130 s after them (process accounting of a cold
# run, issue 44). Their test binary is compiled first, with the same flags
# (go test -c: most of the module's race build), then runs in the
# background, as go test would run it (in its directory, -test.timeout),
# while go test compiles and runs the other packages two at a time.
e2e_pkg=github.com/autodiag/autodiag/cmd/autodiag
mapfile -t listed < <(go list "${pkgs[@]}")
mapfile -t rest < <(printf '%s\n' "${listed[@]}" | grep -vx "$e2e_pkg")
if ((${#rest[@]} > 0 && ${#rest[@]} < ${#listed[@]})); then
	e2e_args=(-test.paniconexit0 -test.timeout=20m)
	[[ -z ${AUTODIAG_TEST_RUN:-} ]] || e2e_args+=("-test.run=$AUTODIAG_TEST_RUN")
	if go_test -c -o "$work/e2e.test" ./cmd/autodiag; then
		e2e_start=$SECONDS
		(cd cmd/autodiag && exec "$root/scripts/testexec" "$work/e2e.test" "${e2e_args[@]}") >"$work/e2e.log" 2>&1 &
		e2e_pid=$!
	else
		printf 'FAIL\t%s [build failed]\n' "$e2e_pkg"
		test_rc=1
	fi
	go_test -exec "$root/scripts/testexec" "${run[@]}" "${rest[@]}" || test_rc=$?
	if [[ -n $e2e_pid ]]; then
		e2e_rc=0
		wait "$e2e_pid" || e2e_rc=$?
		e2e_pid=""
		# As go test prints a package's run: its output only when it failed.
		if ((e2e_rc == 0)); then
			printf 'ok  \t%s\t%ds (beside go test)\n' "$e2e_pkg" $((SECONDS - e2e_start))
		else
			cat "$work/e2e.log"
			printf 'FAIL\t%s\t%ds (beside go test)\n' "$e2e_pkg" $((SECONDS - e2e_start))
			test_rc=1
		fi
	fi
else
	go_test -exec "$root/scripts/testexec" "${run[@]}" "${pkgs[@]}" || test_rc=$?
fi
if [[ -s $AUTODIAG_TEST_RUNS ]]; then
	log "test binaries ran $(awk '{ s += $1; c += $2 } END { printf "%ds (cpu %ds)", s + 0.5, c + 0.5 }' "$AUTODIAG_TEST_RUNS") in all ($(wc -l <"$AUTODIAG_TEST_RUNS") packages, two at once${e2e_start:+, and cmd/autodiag beside them}); the slowest: $(sort -rn "$AUTODIAG_TEST_RUNS" | head -5 | awk -v r="$root/" '{ sub(r, "", $3); printf "%s%s %ds (cpu %ds)", (NR > 1 ? ", " : ""), $3, $1 + 0.5, $2 + 0.5 }'); the most CPU: $(sort -k2,2rn "$AUTODIAG_TEST_RUNS" | head -5 | awk -v r="$root/" '{ sub(r, "", $3); printf "%s%s %ds", (NR > 1 ? ", " : ""), $3, $2 + 0.5 }')"
fi
# agent/redact's corpus tests skip themselves under -race (see
# corpusWithoutRace): they run here without it, with the agent build's
# settings (release_go), so its compile of the standard library serves
# them. ~45 CPU s less than under -race, none dropped.
if go list "${pkgs[@]}" 2>/dev/null | grep -qx 'github.com/autodiag/autodiag/agent/redact'; then
	phase "go test ./agent/redact's corpus tests (without -race)"
	release_go test -vet=off -ldflags=-w -run "${AUTODIAG_TEST_RUN:-^(TestCorpus|TestGitleaksCorpus|TestRedactMatchesLegacy|TestTokenBoundaryMatrix)\$}" ./agent/redact || test_rc=$?
fi
phase "wait for the background builds${lint_beside:+ and golangci-lint run (GOFLAGS -race, beside the tests) ${pkgs[*]}}"
job_rc=0
wait "$builds_pid" || job_rc=$?
builds_pid=""
if [[ -f $work/lint.log ]]; then
	cat "$work/lint.log" >&2
elif ((job_rc != 0)); then
	log "the background builds failed (exit $job_rc)"
fi
((test_rc != 0)) || test_rc=$job_rc
exit "$test_rc"
