#!/usr/bin/env bash
# The main job: build the release `seglog` tool, run its load generator (`seglog bench`) on a
# data directory, print the report, then verify every CRC and index entry the run wrote.
#
# Environment overrides:
#   SEGLOG_DATA_DIR      data directory (default ./seglog-data, emptied first)
#   SEGLOG_WORKLOAD      bench preset (default append)
#   SEGLOG_RECORDS       records to append (default 1000000: 1 GB of 1 KiB records)
#   SEGLOG_BENCH_ARGS    more `seglog bench` options, e.g. "--vs-disk --key-space 1000"
set -euo pipefail
cd "$(dirname "$0")"

data_dir=${SEGLOG_DATA_DIR:-./seglog-data}
workload=${SEGLOG_WORKLOAD:-append}
record_count=${SEGLOG_RECORDS:-1000000}
read -r -a extra_args <<< "${SEGLOG_BENCH_ARGS:-}"

echo "== building the release binary"
cargo build --release --quiet -p seglog-tools
seglog="${CARGO_TARGET_DIR:-target}/release/seglog"
report="${CARGO_TARGET_DIR:-target}/seglog-bench.json"

rm -rf "$data_dir"
echo "== seglog bench --workload $workload --records $record_count --dir $data_dir ${extra_args[*]:-}"
echo "   (1 KiB records in 64 KiB batches, 2 producers over 4 partitions, 32 appends in flight each)"
"$seglog" bench --workload "$workload" --records "$record_count" --dir "$data_dir" \
  --json "$report" "${extra_args[@]}"
echo "== every figure, the configuration and the machine written to $report"

echo "== verifying every CRC and index entry"
"$seglog" verify --dir "$data_dir"
echo "== done: $workload appended $record_count records to $data_dir, verified"
