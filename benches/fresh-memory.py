#!/usr/bin/env python3
"""The machine's cost of touching memory for the first time, without an engine: PROCESSES
processes each map their share of GIB GiB of anonymous memory and write one byte to every 4 KiB
page of it (a first touch: a page fault in the guest and, where the host took the memory back,
one in the host too). Prints MB/s of memory touched over the wall time, and as JSON with --json.

On the VMs measured here a tmpfs append and a cold read both land in pages that are new to the
page cache, so this is the floor under `seglog bench --dir /dev/shm/...` and under cold scans, and
its scaling from one process to two is the machine's own (BENCHMARKS.md, target 5b).

usage: fresh-memory.py GIB PROCESSES [--json FILE]
"""

import json
import mmap
import multiprocessing
import sys
import time

PAGE_BYTES = 4096


def touch(share_bytes, started, results):
    region = mmap.mmap(-1, share_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    started.wait()
    begin = time.monotonic()
    for position in range(0, share_bytes, PAGE_BYTES):
        region[position] = 1
    results.put(time.monotonic() - begin)
    region.close()


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--json"):
        sys.exit(__doc__)
    gib, processes = float(argv[1]), int(argv[2])
    share_bytes = int(gib * (1 << 30)) // processes // PAGE_BYTES * PAGE_BYTES
    started = multiprocessing.Event()
    results = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=touch, args=(share_bytes, started, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(0.2)
    begin = time.monotonic()
    started.set()
    seconds = [results.get() for _ in workers]
    wall_s = time.monotonic() - begin
    for worker in workers:
        worker.join()
    touched = share_bytes * processes
    figures = {
        "processes": processes,
        "bytes": touched,
        "wall_s": round(wall_s, 3),
        "process_s": [round(s, 3) for s in seconds],
        "mb_per_s": round(touched / wall_s / 1e6, 1),
    }
    print(f"fresh memory: {processes} process(es), {touched / 2**30:.1f} GiB touched in "
          f"{wall_s:.2f} s: {figures['mb_per_s']:.0f} MB/s")
    if len(argv) == 5:
        with open(argv[4], "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main(sys.argv)
