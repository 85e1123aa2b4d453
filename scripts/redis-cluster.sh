#!/usr/bin/env bash
# redis-cluster.sh: a throw-away 3-master Redis Cluster on loopback, for tests.
#
#   scripts/redis-cluster.sh start BASEPORT DIR   # nodes on 127.0.0.1:BASEPORT..BASEPORT+2
#   scripts/redis-cluster.sh stop  BASEPORT DIR
#
# start prints the seed addresses (comma-separated, the format of
# AUTODIAG_TEST_REDIS_CLUSTER_ADDRS) on stdout once `cluster info` reports
# cluster_state:ok on every node. Node files, logs and pids live in DIR.
# Uses the Debian redis-server/redis-cli (REDIS_SERVER, REDIS_CLI override).
set -euo pipefail

usage() { echo "usage: $0 start|stop BASEPORT DIR" >&2; exit 2; }
[[ $# -eq 3 ]] || usage
cmd=$1 base=$2 dir=$3
[[ $base =~ ^[0-9]+$ ]] || usage
server=${REDIS_SERVER:-redis-server}
cli=${REDIS_CLI:-redis-cli}
ports=("$base" "$((base + 1))" "$((base + 2))")
timeout_s=${REDIS_CLUSTER_TIMEOUT:-30}

# wait_for DESCRIPTION COMMAND...: poll until COMMAND succeeds or time runs out.
wait_for() {
	local what=$1
	shift
	local deadline=$((SECONDS + timeout_s))
	until "$@"; do
		if ((SECONDS >= deadline)); then
			echo "redis-cluster: timed out after ${timeout_s}s waiting for $what" >&2
			return 1
		fi
		sleep 0.1
	done
}

node_up() { "$cli" -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }
node_down() { ! node_up "$1"; }
cluster_ok() {
	local p
	for p in "${ports[@]}"; do
		"$cli" -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}

start() {
	mkdir -p "$dir"
	local p
	for p in "${ports[@]}"; do
		if node_up "$p"; then
			echo "redis-cluster: something already answers on port $p" >&2
			exit 1
		fi
		mkdir -p "$dir/$p"
		rm -f "$dir/$p/nodes.conf"
		"$server" --port "$p" --bind 127.0.0.1 --dir "$dir/$p" \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
			--save '' --appendonly no --daemonize yes \
			--pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" >/dev/null
	done
	for p in "${ports[@]}"; do
		wait_for "node $p" node_up "$p"
	done
	"$cli" --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
		cat "$dir/create.log" >&2
		exit 1
	}
	wait_for "cluster_state:ok" cluster_ok
	local IFS=,
	echo "${ports[*]/#/127.0.0.1:}"
}

stop() {
	local p
	for p in "${ports[@]}"; do
		"$cli" -h 127.0.0.1 -p "$p" shutdown nosave >/dev/null 2>&1 || true
	done
	for p in "${ports[@]}"; do
		wait_for "node $p to stop" node_down "$p"
	done
}

case $cmd in
start) start ;;
stop) stop ;;
*) usage ;;
esac
