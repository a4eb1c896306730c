#!/usr/bin/env bash
# The main job: build the release `seglog` tool, produce keyed records into a data directory,
# read them back, and verify every CRC and index entry, printing the figures measured.
set -euo pipefail
cd "$(dirname "$0")"

data_dir=${SEGLOG_DATA_DIR:-./seglog-data}
record_count=${SEGLOG_RECORDS:-100000}
topic=main-job
partitions=4

echo "== building the release binary"
cargo build --release --quiet -p seglog-tools
seglog="${CARGO_TARGET_DIR:-target}/release/seglog"

rm -rf "$data_dir"
echo "== producing $record_count keyed records into $data_dir ($partitions partitions)"
start=$(date +%s.%N)
seq 1 "$record_count" \
  | awk '{ printf "key-%d:value-%d-%s\n", $1 % 1000, $1, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }' \
  | "$seglog" produce --dir "$data_dir" --topic "$topic" --partitions "$partitions" --key-separator : --format json \
  > "$data_dir.acks"
end=$(date +%s.%N)
acks=$(wc -l < "$data_dir.acks")
awk -v n="$acks" -v s="$start" -v e="$end" \
  'BEGIN { printf "acknowledged %d records in %.2f s (%.0f records/s, batches of up to 16 KiB, appends pipelined)\n", n, e - s, n / (e - s) }'

echo "== consuming every partition back"
consumed=0
for partition in $(seq 0 $((partitions - 1))); do
  count=$("$seglog" consume --dir "$data_dir" --topic "$topic" --partition "$partition" --from-beginning --format json | wc -l)
  echo "partition $partition: $count records"
  consumed=$((consumed + count))
done
if [ "$consumed" -ne "$record_count" ]; then
  echo "FAILED: consumed $consumed of $record_count records" >&2
  exit 1
fi

echo "== verifying every CRC and index entry"
"$seglog" verify --dir "$data_dir"
rm -f "$data_dir.acks"
echo "== done: $record_count records produced, consumed and verified in $data_dir"
