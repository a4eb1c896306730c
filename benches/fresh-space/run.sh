#!/usr/bin/env bash
# What a durable round costs on this disk by how its files find space (rounds.c), and what each
# fdatasync sent the device: data writes, metadata writes (the inode, bitmap and extent blocks
# ext4 writes in place when a sync follows an allocation), and cache flushes.
# Usage: benches/fresh-space/run.sh [DIR] [ROUNDS] [REPEATS]   (as root, with gcc and perf)
set -euo pipefail
dir=${1:-/var/tmp/fresh-space}
rounds=${2:-3000}
repeats=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
gcc -O2 -Wall -o "$dir/rounds" "$here/rounds.c" -lpthread
for repeat in $(seq "$repeats"); do
    for way in grow fallocate overwrite ahead apart; do
        perf record -q -a -e block:block_rq_issue -e ext4:ext4_sync_file_enter \
            -o "$dir/perf.data" -- "$dir/rounds" "$way" "$rounds" "$dir" 2>/dev/null |
            tr '\n' ' '
        # rwbs: W data write, WSM or WM metadata write, FF a cache flush.
        perf script -i "$dir/perf.data" 2>/dev/null | awk '
            /ext4_sync_file_enter/ { syncs++ }
            /block_rq_issue/ {
                for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,[0-9]+$/) { kind = $(i + 1); break }
                if (kind == "FF") flushes++
                else if (kind ~ /^W/ && kind ~ /M/) meta++
                else if (kind ~ /^W/) data++
            }
            END { printf "| per sync: data writes %.2f, metadata writes %.2f, flushes %.2f (%d syncs)\n",
                  data / syncs, meta / syncs, flushes / syncs, syncs }'
    done
done
rm -f "$dir/perf.data" "$dir/rounds"
