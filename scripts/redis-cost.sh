#!/usr/bin/env bash
# redis-cost.sh: how many instructions redis-server executes in tock's scripts per run,
# for each step of a one-time job's life, and per node of three-node workflow chains,
# counted by valgrind's callgrind. Counts repeat exactly from run to run, whatever else
# the machine is doing, unlike times: this is the figure to compare when changing a
# script (see bench/README.md).
#
#   scripts/redis-cost.sh [JOBS [CHAINS]]     (default 20000, and JOBS/4 chains)
#
# It starts a redis-server under callgrind on a free loopback port, counting only inside
# FCALL, EVALSHA and EVAL (the scripts and the commands they call), runs BenchmarkRedisCost
# (shard/cost_test.go) against it with JOBS jobs on 64 shards, then BenchmarkRedisCostChains
# with CHAINS chains, and prints one JSON object: instructions per run for create, fire,
# claim and ack, per call for a fire and a claim that find nothing to do, and per chain
# created and per node claimed and acked (the ack moves the node's workflow and releases
# the next node). Needs valgrind, redis-server and go on PATH; it takes
# about 80 s for 20,000 jobs (with fewer, every set is a small listpack, which costs
# differently from the sets of a real run). REDIS_SERVER names the server binary.
#
# Exit status: 0 success, 1 failure, 2 usage error.
set -euo pipefail

usage() {
  echo "usage: scripts/redis-cost.sh [JOBS [CHAINS]]" >&2
  exit 2
}
jobs=${1:-20000}
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]] || (($# > 2)); then
  usage
fi
chains=${2:-$(((jobs + 3) / 4))}
if ! [[ $chains =~ ^[1-9][0-9]*$ ]]; then
  usage
fi
REDIS_SERVER=${REDIS_SERVER:-redis-server}
cd "$(dirname "$0")/.."
for tool in valgrind callgrind_control "$REDIS_SERVER" redis-cli go; do
  if ! command -v "$tool" >/dev/null; then
    echo "redis-cost.sh: $tool not found" >&2
    exit 1
  fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/tock-redis-cost.XXXXXX")
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [[ -n ${TOCK_COST_KEEP:-} ]]; then echo "redis-cost.sh: callgrind dumps kept in $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

# A free port: bind to port 0 and read what the kernel chose.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
  --toggle-collect=fcallCommand --toggle-collect=evalShaCommand --toggle-collect=evalCommand \
  "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  >"$dir/valgrind.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "redis-cost.sh: redis-server under valgrind exited:" >&2
    cat "$dir/valgrind.log" >&2
    exit 1
  fi
  sleep 0.2
done

if ! TOCK_COST_ADDR="127.0.0.1:$port" TOCK_COST_CALLGRIND="$pid" \
  go test ./shard -run '^$' -bench '^BenchmarkRedisCost$' -benchtime "${jobs}x" -count 1 >"$dir/bench.log" 2>&1; then
  echo "redis-cost.sh: benchmark failed:" >&2
  cat "$dir/bench.log" >&2
  exit 1
fi
if ! TOCK_COST_ADDR="127.0.0.1:$port" TOCK_COST_CALLGRIND="$pid" \
  go test ./shard -run '^$' -bench '^BenchmarkRedisCostChains$' -benchtime "${chains}x" -count 1 >"$dir/bench-chains.log" 2>&1; then
  echo "redis-cost.sh: chains benchmark failed:" >&2
  cat "$dir/bench-chains.log" >&2
  exit 1
fi
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$pid" 2>/dev/null || true
pid=

# Each dump holds the instructions since the one before. A benchmark runs once with one
# job before the measured round, so only the dumps after its last "start" ("start",
# "chain-start") count; a step dumped once per round (claim, ack) is the sum of its dumps.
part_of() { awk '/^part:/ {print $2; exit}' "$1"; }
measured_from() {
  local f part best=-1
  for f in $(grep -l "^desc: Trigger: dump $1\$" "$dir"/cg.out.* 2>/dev/null); do
    part=$(part_of "$f")
    if ((part > best)); then
      best=$part
    fi
  done
  echo "$best"
}
summary() {
  local f from total=0 found=
  from=$(measured_from "$([[ $1 == chain-* ]] && echo chain-start || echo start)")
  for f in $(grep -l "^desc: Trigger: dump $1\$" "$dir"/cg.out.* 2>/dev/null); do
    if (($(part_of "$f") > from)); then
      total=$((total + $(awk '/^summary:/ {print $2}' "$f")))
      found=1
    fi
  done
  if [[ -z $found ]]; then
    echo "redis-cost.sh: no callgrind dump for step $1" >&2
    exit 1
  fi
  echo "$total"
}
per() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", a / b}'; }
calls=6400 # the empty calls of each kind BenchmarkRedisCost makes
nodes=$((3 * chains))
printf '{"jobs":%d,"shards":64,"instructions_per_run":{"create":%s,"fire":%s,"claim":%s,"ack":%s},"instructions_per_empty_call":{"fire":%s,"claim":%s},"chains":%d,"instructions_per_chain":{"create":%s},"instructions_per_node":{"claim":%s,"ack":%s}}\n' \
  "$jobs" "$(per "$(summary create)" "$jobs")" "$(per "$(summary fire)" "$jobs")" \
  "$(per "$(summary claim)" "$jobs")" "$(per "$(summary ack)" "$jobs")" \
  "$(per "$(summary fire-empty)" $calls)" "$(per "$(summary claim-empty)" $calls)" \
  "$chains" "$(per "$(summary chain-create)" "$chains")" \
  "$(per "$(summary chain-claim)" $nodes)" "$(per "$(summary chain-ack)" $nodes)"
