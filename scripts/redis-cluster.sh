#!/usr/bin/env bash
# redis-cluster.sh: a local Redis Cluster of 6 redis-server processes (3 masters,
# 3 replicas, AOF with appendfsync everysec), the topology of docker-compose.yml,
# for machines without Docker. See docs/deploy.md.
#
#   scripts/redis-cluster.sh up     [--base-port 7000] [--dir DIR] [--timeout 60]
#   scripts/redis-cluster.sh status [--base-port 7000] [--dir DIR]
#   scripts/redis-cluster.sh down   [--base-port 7000] [--dir DIR]
#
# up starts the nodes on 127.0.0.1, ports BASE..BASE+5 (cluster bus BASE+10000..
# BASE+10005), each daemonized with its own data directory DIR/<port>; forms the
# cluster (redis-cli --cluster create ... --cluster-replicas 1), waits until every
# node reports cluster_state:ok and every replica is in sync, and prints the seed
# addresses, comma-separated, as the only line on stdout:
#
#   export TOCK_REDIS=$(scripts/redis-cluster.sh up)
#
# up is idempotent: nodes already running are kept, nodes of DIR that were
# stopped (a reboot) are restarted from their AOF and nodes.conf, and a formed
# cluster is not formed again. It refuses to start a node whose port (or bus
# port) is taken by another process, and names the ports.
#
# down shuts the nodes down (SHUTDOWN NOSAVE NOW, then SIGTERM and SIGKILL through
# their pid files if they do not exit) and removes DIR; it is a no-op when
# nothing is there. status prints each node's role and the cluster state.
#
# DIR defaults to ${TMPDIR:-/tmp}/tock-redis-cluster-BASE. REDIS_SERVER and
# REDIS_CLI name the binaries (default: redis-server and redis-cli on PATH).
#
# Exit status: 0 success (status: the cluster is up and healthy), 1 failure
# (status: not running or unhealthy), 2 usage error, 3 a port is taken.
set -euo pipefail

readonly NODES=6
readonly HOST=127.0.0.1
readonly MARKER=.tock-redis-cluster
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}

base_port=7000
dir=""
timeout=60

prog=$(basename "$0")

usage() {
	cat <<EOF
usage: $prog up|down|status [--base-port PORT] [--dir DIR] [--timeout SECONDS]

  up      start 6 redis-server nodes (3 masters, 3 replicas, AOF everysec) on
          $HOST:PORT..PORT+5, form the cluster, wait until it is healthy and
          print the seed addresses (export TOCK_REDIS=\$($prog up))
  status  print every node's role and the cluster state (exit 1 unless healthy)
  down    stop the nodes and remove DIR

  --base-port PORT  first port (default 7000; the cluster bus uses PORT+10000...)
  --dir DIR         data directory (default \${TMPDIR:-/tmp}/tock-redis-cluster-PORT)
  --timeout SECONDS how long up waits for the cluster to become healthy (default 60)
EOF
}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# cli PORT ARGS...: one command to one node, raw output, short timeouts.
cli() {
	local port=$1
	shift
	"$REDIS_CLI" -h "$HOST" -p "$port" --raw "$@" 2>/dev/null
}

# info_field TEXT FIELD: the value of "FIELD:value" in INFO-style TEXT.
info_field() {
	printf '%s\n' "$1" | tr -d '\r' | sed -n "s/^$2://p" | head -n 1
}

node_port() { echo $((base_port + $1)); }

pid_of() {
	local f="$dir/$1/redis.pid"
	[[ -s $f ]] && tr -dc '0-9' <"$f"
}

# running PID: the process runs (a zombie, which stays until its parent, often
# init, reaps it, does not count).
running() {
	local stat
	kill -0 "$1" 2>/dev/null || return 1
	if [[ -r /proc/$1/stat ]]; then
		stat=$(<"/proc/$1/stat") || return 1
		stat=${stat##*) }
		[[ ${stat:0:1} != Z ]] || return 1
	fi
}

# alive PORT: the node of PORT started from DIR runs (its pid file names a live
# redis-server process).
alive() {
	local pid
	pid=$(pid_of "$1") || return 1
	[[ -n $pid ]] || return 1
	running "$pid" || return 1
	if [[ -r /proc/$pid/cmdline ]]; then
		tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "redis-server" || return 1
	fi
}

# port_in_use PORT: HOST:PORT is taken: something listens there, or (with ss)
# a connection uses it as its local port, which also makes bind fail.
port_in_use() {
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Htan exclude time-wait "sport = :$1" 2>/dev/null) ]] && return 0
	fi
	(exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# ephemeral_overlap: the cluster ports overlap the kernel's range of local ports
# for outgoing connections, where a port can be taken at any time.
ephemeral_overlap() {
	local f=/proc/sys/net/ipv4/ip_local_port_range lo hi
	[[ -r $f ]] || return 1
	read -r lo hi <"$f"
	local first
	for first in "$base_port" $((base_port + 10000)); do
		((first + NODES - 1 >= lo && first <= hi)) && return 0
	done
	return 1
}

seeds() {
	local i out=""
	for ((i = 0; i < NODES; i++)); do
		out+="${out:+,}$HOST:$(node_port "$i")"
	done
	printf '%s\n' "$out"
}

parse_args() {
	while (($# > 0)); do
		case $1 in
		--base-port | --dir | --timeout)
			if (($# < 2)); then
				log "$1 needs a value"
				exit 2
			fi
			set -- "$1=$2" "${@:3}"
			;;
		--base-port=*) base_port=${1#*=}; shift ;;
		--dir=*) dir=${1#*=}; shift ;;
		--timeout=*) timeout=${1#*=}; shift ;;
		-h | --help) usage; exit 0 ;;
		*) usage >&2; log "unknown argument: $1"; exit 2 ;;
		esac
	done
	if ! [[ $base_port =~ ^[0-9]+$ ]] || ((base_port < 1024 || base_port + NODES - 1 + 10000 > 65535)); then
		log "--base-port $base_port: want 1024 to $((65535 - 10000 - NODES + 1)) (the cluster bus uses port+10000)"
		exit 2
	fi
	if ! [[ $timeout =~ ^[0-9]+$ ]] || ((timeout < 1)); then
		log "--timeout $timeout: want a whole number of seconds"
		exit 2
	fi
	dir=${dir:-${TMPDIR:-/tmp}/tock-redis-cluster-$base_port}
	dir=${dir%/}
	[[ -n $dir ]] || { log "--dir: want a directory other than /"; exit 2; }
	# redis-server resolves the paths of its config after moving into its dir.
	[[ $dir == /* ]] || dir=$PWD/$dir
}

need_binaries() {
	local b
	for b in "$REDIS_SERVER" "$REDIS_CLI"; do
		command -v "$b" >/dev/null 2>&1 || die "$b not found (install redis-server 7 or later, e.g. apt-get install -y redis-server)"
	done
}

# conf_quote S: S as one argument of a redis.conf line: in double quotes, with
# backslashes and double quotes escaped (a path may hold spaces).
conf_quote() {
	local s=${1//\\/\\\\}
	printf '"%s"' "${s//\"/\\\"}"
}

write_conf() {
	local port=$1 d="$dir/$1"
	mkdir -p "$d"
	cat >"$d/redis.conf" <<EOF
# Written by $prog; node $HOST:$port of a local tock Redis Cluster.
bind $HOST
port $port
dir $(conf_quote "$d")
daemonize yes
pidfile $(conf_quote "$d/redis.pid")
logfile $(conf_quote "$d/redis.log")
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 5000
cluster-announce-ip $HOST
appendonly yes
appendfsync everysec
save ""
EOF
}

start_node() {
	local port=$1 d="$dir/$1"
	[[ -f $d/redis.conf ]] || write_conf "$port"
	if ! "$REDIS_SERVER" "$d/redis.conf" >/dev/null; then
		die "redis-server on port $port did not start; see $d/redis.log"
	fi
}

wait_ping() {
	local port=$1 deadline=$((SECONDS + 10)) gone=0
	until [[ $(cli "$port" PING) == PONG ]]; do
		# A daemonized redis-server that cannot listen exits after forking.
		if alive "$port"; then gone=0; else gone=$((gone + 1)); fi
		if ((SECONDS >= deadline || gone > 20)); then
			tail -n 3 "$dir/$port/redis.log" >&2 2>/dev/null || true
			die "node $HOST:$port did not start (log: $dir/$port/redis.log); '$prog down' stops the others"
		fi
		sleep 0.1
	done
}

# healthy: every node reports cluster_state:ok with all slots and 6 known
# nodes, there are 3 masters and 3 replicas, and every replica's link to its
# master is up with no sync in progress. Sets $why otherwise.
why=""
healthy() {
	local i port info repl masters=0 replicas=0
	for ((i = 0; i < NODES; i++)); do
		port=$(node_port "$i")
		info=$(cli "$port" CLUSTER INFO) || { why="$HOST:$port does not answer"; return 1; }
		if [[ $(info_field "$info" cluster_state) != ok ]]; then
			why="$HOST:$port: cluster_state:$(info_field "$info" cluster_state)"
			return 1
		fi
		if [[ $(info_field "$info" cluster_slots_assigned) != 16384 || $(info_field "$info" cluster_known_nodes) != "$NODES" ]]; then
			why="$HOST:$port: $(info_field "$info" cluster_slots_assigned) slots assigned, $(info_field "$info" cluster_known_nodes) nodes known"
			return 1
		fi
		repl=$(cli "$port" INFO replication) || { why="$HOST:$port does not answer"; return 1; }
		case $(info_field "$repl" role) in
		master) masters=$((masters + 1)) ;;
		slave)
			replicas=$((replicas + 1))
			if [[ $(info_field "$repl" master_link_status) != up || $(info_field "$repl" master_sync_in_progress) != 0 ]]; then
				why="replica $HOST:$port: master_link_status:$(info_field "$repl" master_link_status), master_sync_in_progress:$(info_field "$repl" master_sync_in_progress)"
				return 1
			fi
			;;
		esac
	done
	if ((masters != NODES / 2 || replicas != NODES / 2)); then
		why="$masters masters and $replicas replicas (want $((NODES / 2)) and $((NODES / 2)))"
		return 1
	fi
}

# formed: some node already knows the other nodes (the cluster was created).
formed() {
	local i info
	for ((i = 0; i < NODES; i++)); do
		info=$(cli "$(node_port "$i")" CLUSTER INFO) || continue
		if [[ $(info_field "$info" cluster_known_nodes) != 1 ]]; then
			return 0
		fi
	done
	return 1
}

cmd_up() {
	need_binaries
	if [[ -e $dir && ! -f $dir/$MARKER ]] && [[ -n $(ls -A "$dir" 2>/dev/null) ]]; then
		die "$dir exists and was not made by $prog; choose another --dir"
	fi
	mkdir -p "$dir"
	touch "$dir/$MARKER"

	# Refuse before starting anything: every port of a node that is not ours must be free.
	local i port taken=()
	for ((i = 0; i < NODES; i++)); do
		port=$(node_port "$i")
		alive "$port" && continue
		port_in_use "$port" && taken+=("$port")
		port_in_use $((port + 10000)) && taken+=("$((port + 10000)) (cluster bus of $port)")
	done
	if ((${#taken[@]} > 0)); then
		log "ports already in use on $HOST: ${taken[*]}"
		log "stop what listens there, or choose other ports with --base-port"
		exit 3
	fi
	if ephemeral_overlap; then
		log "warning: ports $base_port-$((base_port + NODES - 1)) or their bus ports $((base_port + 10000))-$((base_port + 10000 + NODES - 1)) overlap the ephemeral port range ($(tr '\t' '-' </proc/sys/net/ipv4/ip_local_port_range)); outgoing connections may take them"
	fi

	local started=0
	for ((i = 0; i < NODES; i++)); do
		port=$(node_port "$i")
		if ! alive "$port"; then
			start_node "$port"
			started=$((started + 1))
		fi
	done
	for ((i = 0; i < NODES; i++)); do
		wait_ping "$(node_port "$i")"
	done
	((started == 0)) || log "started $started node(s) in $dir"

	if ! formed; then
		local addrs=()
		for ((i = 0; i < NODES; i++)); do
			addrs+=("$HOST:$(node_port "$i")")
		done
		log "forming the cluster: ${addrs[*]}"
		local out
		if ! out=$("$REDIS_CLI" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes 2>&1); then
			printf '%s\n' "$out" >&2
			die "redis-cli --cluster create failed"
		fi
	fi

	local deadline=$((SECONDS + timeout))
	until healthy; do
		if ((SECONDS >= deadline)); then
			die "cluster not healthy after ${timeout}s: $why (logs in $dir/*/redis.log)"
		fi
		sleep 0.2
	done
	log "cluster up: 3 masters, 3 replicas, AOF everysec; data in $dir"
	seeds
}

stop_node() {
	local port=$1 pid
	pid=$(pid_of "$port") || return 0
	alive "$port" || return 0
	# NOW (Redis 7): do not wait up to shutdown-timeout for replicas to catch up; the
	# data is removed anyway. Older servers reject it and get the plain form.
	if [[ $(cli "$port" SHUTDOWN NOSAVE NOW) == *ERR* ]]; then
		cli "$port" SHUTDOWN NOSAVE >/dev/null || true
	fi
	local deadline=$((SECONDS + 10)) sig=TERM
	while running "$pid"; do
		if ((SECONDS >= deadline)); then
			[[ $sig == KILL ]] && die "redis-server pid $pid (port $port) does not exit"
			log "redis-server pid $pid (port $port) still runs; sending SIG$sig"
			kill -s "$sig" "$pid" 2>/dev/null || true
			deadline=$((SECONDS + 5))
			sig=KILL
		fi
		sleep 0.1
	done
}

cmd_down() {
	if [[ ! -d $dir ]]; then
		log "nothing to stop: $dir does not exist"
		return 0
	fi
	[[ -f $dir/$MARKER ]] || die "$dir was not made by $prog; not touching it"
	local port d stopped=0
	for d in "$dir"/*/; do
		port=$(basename "$d")
		[[ $port =~ ^[0-9]+$ ]] || continue
		if alive "$port"; then
			stop_node "$port"
			stopped=$((stopped + 1))
		fi
	done
	rm -rf "$dir"
	log "stopped $stopped node(s), removed $dir"
}

cmd_status() {
	if [[ ! -f $dir/$MARKER ]]; then
		log "not running: no cluster in $dir"
		return 1
	fi
	local i port role repl state
	printf '%-16s %-8s %-8s %s\n' NODE PID ROLE DETAIL
	for ((i = 0; i < NODES; i++)); do
		port=$(node_port "$i")
		if ! alive "$port"; then
			printf '%-16s %-8s %-8s %s\n' "$HOST:$port" - down "-"
			continue
		fi
		repl=$(cli "$port" INFO replication) || repl=""
		role=$(info_field "$repl" role)
		state=$(info_field "$(cli "$port" CLUSTER INFO)" cluster_state)
		if [[ $role == slave ]]; then
			printf '%-16s %-8s %-8s %s\n' "$HOST:$port" "$(pid_of "$port")" replica \
				"of $(info_field "$repl" master_host):$(info_field "$repl" master_port), link $(info_field "$repl" master_link_status), cluster_state:$state"
		else
			printf '%-16s %-8s %-8s %s\n' "$HOST:$port" "$(pid_of "$port")" "${role:-?}" \
				"$(info_field "$repl" connected_slaves) replica(s), cluster_state:$state"
		fi
	done
	if healthy; then
		echo "cluster healthy; seeds: $(seeds)"
	else
		echo "cluster not healthy: $why"
		return 1
	fi
}

main() {
	if (($# == 0)); then
		usage >&2
		exit 2
	fi
	local cmd=$1
	shift
	case $cmd in
	-h | --help | help) usage; exit 0 ;;
	up | down | status) ;;
	*) usage >&2; log "unknown command: $cmd"; exit 2 ;;
	esac
	parse_args "$@"
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	esac
}

main "$@"
