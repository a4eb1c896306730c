#!/usr/bin/env bash
# One dated run of everything issue 4's performance targets are read from, on this machine, in
# one go: every `seglog bench` preset with `--vs-disk`, the O_DIRECT write path, many-partitions
# beside 8 partitions, appends and hot fetches with one shard beside two on tmpfs next to fio's
# own one job beside two and benches/fresh-memory.py's one process beside two (three alternating
# rounds), and the embedded peers' harness when it is built. Each
# figure lands as JSON in OUT; `benches/targets.py OUT` then prints the targets table from them
# (BENCHMARKS.md § The targets, one dated run). Every bench, fio job and the peers' phases first
# wait for memory the run before freed to be handed back to the host (BENCHMARKS.md § Durable
# appends after freed memory).
#
# Usage: benches/dated-run.sh [OUT]   (default: /var/tmp/seglog-run-<UTC date>)
# Environment:
#   SCRATCH   the data directory's parent, on the disk under test (default /var/tmp)
#   DURATION  seconds per preset (default 5)
#   PEERS     the peers harness binary (default /tmp/target-peers-full/release/peers; skipped
#             when absent: see benches/peers/README.md to build it)
# Needs root for `drop_caches` (fetch-cold, random-fetch, the peers' cold phases) and fio for the
# disk's own figures (`apt-get install -y fio`; without it `--vs-disk` uses its built-in loops).
set -euo pipefail
cd "$(dirname "$0")/.."

stamp=$(date -u +%Y-%m-%dT%H%MZ)
out=${1:-/var/tmp/seglog-run-$stamp}
scratch=${SCRATCH:-/var/tmp}
duration=${DURATION:-5}
peers=${PEERS:-/tmp/target-peers-full/release/peers}
data="$scratch/seglog-dated-run"
mkdir -p "$out"

cargo build --release --quiet -p seglog-tools
seglog=${CARGO_TARGET_DIR:-target}/release/seglog

{
  echo "date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)"
  echo "kernel=$(uname -r) cores=$(nproc) fio=$(fio --version 2>/dev/null || echo none)"
} | tee "$out/run.txt"

# One preset: its report goes to OUT/NAME.txt, its figures to OUT/NAME.json.
bench() {
  local name=$1
  shift
  rm -rf "$data"
  echo "== $name: seglog bench $*" | tee -a "$out/run.txt"
  "$seglog" bench "$@" --dir "$data" --json "$out/$name.json" | tee "$out/$name.txt"
  rm -rf "$data"
}

for workload in append group-commit fetch-hot fetch-cold random-fetch tail; do
  bench "$workload" --workload "$workload" --duration "$duration" --vs-disk
done
for workload in append group-commit; do
  bench "$workload-direct" --workload "$workload" --duration "$duration" --vs-disk --direct-io
done
for round in 1 2; do
  bench "many-partitions-$round" --workload many-partitions --duration "$duration"
  bench "partitions-8-$round" --workload append --partitions 8 --duration "$duration"
done
# Scaling where the disk is not the limit: tmpfs, appends and hot fetches with one shard and
# two, beside fio writing fresh tmpfs pages with one job and two (what the appends' page-cache
# copies cost the kernel here, without an engine).
# Waits as `seglog bench` does before each phase (tools/src/bench/settle.rs) until memory freed
# before (the last run's files) has been handed back to the host by free page reporting: until
# its count stood still for 4 s, at most 120 s; nothing where the machine does not report.
settle() {
  local count=/sys/module/page_reporting/parameters/reported_kib
  [ -r "$count" ] || return 0
  local last quiet=0 waited=0 now
  last=$(cat "$count")
  while [ "$quiet" -lt 40 ] && [ "$waited" -lt 1200 ]; do
    sleep 0.1
    now=$(cat "$count")
    if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; last=$now; fi
    waited=$((waited + 1))
  done
}
fio_tmpfs() {
  local jobs=$1 name=$2
  settle
  mkdir -p /dev/shm/seglog-fio
  echo "== $name: fio sequential 256 KiB writes into fresh tmpfs pages, $jobs job(s)" |
    tee -a "$out/run.txt"
  fio --name=tmpfs-write --directory=/dev/shm/seglog-fio --rw=write --bs=256k --size=8g \
    --numjobs="$jobs" --runtime=4 --group_reporting --ioengine=psync --output-format=json \
    > "$out/$name.json"
  rm -rf /dev/shm/seglog-fio
}
# And beside both, the machine's first touches of fresh memory with one process and two
# (benches/fresh-memory.py): what a page new to the page cache costs here without the kernel's
# file-system code, and how that scales from one core to two.
fresh_memory() {
  local processes=$1 name=$2
  settle
  echo "== $name: benches/fresh-memory.py 2 $processes" | tee -a "$out/run.txt"
  python3 benches/fresh-memory.py 2 "$processes" --json "$out/$name.json" | tee "$out/$name.txt"
}
for round in 1 2 3; do
  for shards in 1 2; do
    data=/dev/shm/seglog-dated-run bench "shards-$shards-$round" --workload append \
      --duration 4 --shards "$shards"
    data=/dev/shm/seglog-dated-run bench "fetch-hot-shards-$shards-$round" \
      --workload fetch-hot --duration 4 --shards "$shards"
    if command -v fio > /dev/null; then
      fio_tmpfs "$shards" "fio-tmpfs-$shards-$round"
    fi
    fresh_memory "$shards" "fresh-memory-$shards-$round"
  done
done

if [ -x "$peers" ]; then
  echo "== peers: $peers --dir $scratch --json $out/peers.json" | tee -a "$out/run.txt"
  "$peers" --dir "$scratch" --json "$out/peers.json" | tee "$out/peers.md"
else
  echo "== peers: $peers not built, skipped (benches/peers/README.md)" | tee -a "$out/run.txt"
fi

python3 benches/targets.py "$out" | tee "$out/targets.md"
