#!/usr/bin/env bash
# One dated run of everything issue 4's performance targets are read from, on this machine, in
# one go: every `seglog bench` preset with `--vs-disk`, both write paths by name, many-partitions
# beside 8 partitions, appends with one shard beside two on tmpfs next to fio's own one job
# beside two (benches/tmpfs-scaling.py, four alternating rounds), hot fetches with one shard
# beside two on tmpfs (five rounds), and the embedded peers' harness when it is built. Each
# figure lands as JSON in OUT; `benches/targets.py OUT` then prints the targets table from them
# (BENCHMARKS.md § Other benchmarks). Every bench, fio job and the peers' phases first wait for
# memory the run before freed to be handed back to the host (BENCHMARKS.md § `seglog bench`,
# `--settle`).
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
  "$seglog" bench "$@" --settle --dir "$data" --json "$out/$name.json" | tee "$out/$name.txt"
  rm -rf "$data"
}

# fetch-cold reads its data set once: at twice the duration that is about 3.5 GB, read back in
# about a second past the page cache, so the read's first windows are not a tenth of the phase
# (at 5 s, 1.8 GB: 0.77× fio, against 0.84-0.98× at 3.6-4.0 GB in the same minutes).
for workload in append group-commit fetch-hot fetch-cold random-fetch tail; do
  seconds=$duration
  [ "$workload" = fetch-cold ] && seconds=$((2 * duration))
  bench "$workload" --workload "$workload" --duration "$seconds" --vs-disk
done
# The presets above write as `--direct-io auto` chooses (the disk's faster sequential write in
# the same run); each write path is also run by name, group-commit's in three alternating rounds
# (its p99.9 beside the bare producers' moved 0.79-1.18x between two runs of one path in one run).
bench append-direct --workload append --duration "$duration" --vs-disk --direct-io
bench append-buffered --workload append --duration "$duration" --vs-disk --direct-io off
for round in 1 2 3; do
  bench "group-commit-direct-$round" --workload group-commit --duration "$duration" --vs-disk \
    --direct-io
  bench "group-commit-buffered-$round" --workload group-commit --duration "$duration" \
    --vs-disk --direct-io off
done
bench fetch-cold-direct --workload fetch-cold --duration "$((2 * duration))" --vs-disk \
  --direct-reads
for round in 1 2; do
  bench "many-partitions-$round" --workload many-partitions --duration "$duration"
  bench "partitions-8-$round" --workload append --partitions 8 --duration "$duration"
done
# Scaling where the disk is not the limit: tmpfs. Appends with one shard and two beside fio
# writing fresh tmpfs pages with one job and two, in four alternating rounds, with the cores'
# accounting and (where perf is installed) the kernel's copy per GB
# (benches/tmpfs-scaling.py, which waits for free page reporting before every run itself).
if command -v fio > /dev/null; then
  echo "== tmpfs-scaling: benches/tmpfs-scaling.py $seglog 4 $out" | tee -a "$out/run.txt"
  python3 benches/tmpfs-scaling.py "$seglog" 4 "$out" \
    $(command -v perf > /dev/null && echo --perf) | tee "$out/tmpfs-scaling.md"
fi
# Then hot fetches with one shard and two, five alternating rounds (targets.py judges the median).
for round in 1 2 3 4 5; do
  for shards in 1 2; do
    data=/dev/shm/seglog-dated-run bench "fetch-hot-shards-$shards-$round" \
      --workload fetch-hot --duration 4 --shards "$shards"
  done
done

if [ -x "$peers" ]; then
  echo "== peers: $peers --dir $scratch --json $out/peers.json" | tee -a "$out/run.txt"
  "$peers" --dir "$scratch" --json "$out/peers.json" | tee "$out/peers.md"
else
  echo "== peers: $peers not built, skipped (benches/peers/README.md)" | tee -a "$out/run.txt"
fi

python3 benches/targets.py "$out" | tee "$out/targets.md"
