#!/usr/bin/env python3
"""Issue 40's targets, measured in one go on this machine and printed as a Markdown table.

Usage: benches/issue40.py SEGLOG OUT [--before SEGLOG_BEFORE] [--rounds N]
   SEGLOG         the `seglog` binary under test (cargo build --release -p seglog-tools)
   OUT            a directory for each run's JSON, the table (targets.md) and target 4's CPU-s
                  per GB of every round (cpu.json)
   --before       a `seglog` built before issue 40 (003e64c): target 4's CPU per GB beside it
   --rounds       alternating rounds of every run (default 2); the table shows medians

Every run uses the default configuration and the presets' own flags only; `--vs-disk` runs fio
(the ruler) in the same process just before the engine. Target 4 runs each build without
`--vs-disk` and takes the whole process's CPU time (user + system, every thread) from the
kernel's accounting of the finished child, over the GB the run appended. Standard library only.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from targets import get  # issue 4's reader of a report's dotted keys

SCRATCH = os.environ.get("SCRATCH", "/var/tmp")


def bench(seglog, out, name, args):
    """Runs `seglog bench ARGS --json OUT/NAME.json` in a fresh data directory; returns the
    report and the child's CPU seconds."""
    with tempfile.TemporaryDirectory(dir=SCRATCH, prefix="seglog-issue40-") as data:
        report_path = out / f"{name}.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        command = [seglog, "bench", *args, "--dir", f"{data}/d", "--json", str(report_path)]
        with open(out / f"{name}.txt", "w") as text:
            if subprocess.run(command, stdout=text).returncode != 0:
                print(f"   {name} failed; once more", flush=True)
                shutil.rmtree(f"{data}/d", ignore_errors=True)
                subprocess.run(command, check=True, stdout=text)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(report_path.read_text()), cpu


def appended_gb(report, phase):
    records, per_s, mb_per_s = (get(report, f"{phase}.{key}")
                                for key in ("records", "records_per_s", "mb_per_s"))
    return mb_per_s * (records / per_s) / 1000.0


def median(values):
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=2):
    return "–" if value is None else f"{value:,.{digits}f}"


def verdict(met):
    return "met" if met else "**not met**"


RUNS = {
    "append": ["--workload", "append", "--duration", "5", "--vs-disk"],
    "append100": ["--workload", "append", "--record-size", "100", "--duration", "5", "--vs-disk"],
    "group-commit": ["--workload", "group-commit", "--duration", "5", "--vs-disk"],
    "records-20000": ["--workload", "append", "--records", "20000"],
    "duration-5": ["--workload", "append", "--duration", "5"],
}
CPU_RUNS = {
    "cpu-append": (["--workload", "append", "--duration", "5"], "append"),
    "cpu-durable": (["--workload", "group-commit", "--duration", "5"], "durable"),
}


def measure(args, out):
    results = {name: [] for name in RUNS}
    cpu = {}
    builds = [("now", args.seglog)] + ([("before", args.before)] if args.before else [])
    for round_ in range(1, args.rounds + 1):
        for name, flags in RUNS.items():
            print(f"== round {round_}: {name}", flush=True)
            results[name].append(bench(args.seglog, out, f"{name}-{round_}", flags)[0])
        for build, seglog in builds:
            for name, (flags, phase) in CPU_RUNS.items():
                print(f"== round {round_}: {name} ({build})", flush=True)
                report, seconds = bench(seglog, out, f"{name}-{build}-{round_}", flags)
                cpu.setdefault((name, build), []).append(seconds / appended_gb(report, phase))
    return results, cpu


def table(results, cpu, rounds):
    def med(name, key):
        return median(get(report, key) for report in results[name])

    append_mb, best = med("append", "append.mb_per_s"), med("append", "disk.write_mb_per_s")
    rows = []
    ratio1 = med("append", "append.vs_disk")
    rows.append(("1. `append` (1 KiB) ≥ 0.9× the disk's best sequential write, flush included",
                 f"{fmt(append_mb, 1)} MB/s over {fmt(best, 1)}", f"{fmt(ratio1)}×",
                 verdict(ratio1 is not None and ratio1 >= 0.9)))
    rate100, mb100 = med("append100", "append.records_per_s"), med("append100", "append.mb_per_s")
    share = mb100 / append_mb if mb100 and append_mb else None
    rows.append(("2. `append --record-size 100` ≥ 15 M records/s and ≥ 0.8× target 1's MB/s",
                 f"{fmt(rate100 / 1e6)} M records/s, {fmt(mb100, 1)} MB/s",
                 f"{fmt(share)}× target 1",
                 verdict(rate100 is not None and rate100 >= 15e6 and share >= 0.8)))
    group_mb = med("group-commit", "durable.mb_per_s")
    share3 = group_mb / append_mb if group_mb and append_mb else None
    rows.append(("3a. `group-commit` ≥ 0.7× target 1's MB/s", f"{fmt(group_mb, 1)} MB/s",
                 f"{fmt(share3)}×", verdict(share3 is not None and share3 >= 0.7)))
    p999 = med("group-commit", "durable.latency_us.p999")
    fio_p999 = med("group-commit", "disk.limits.append_fdatasync.65536.fdatasync_us.p999")
    over = p999 / fio_p999 if p999 and fio_p999 else None
    rows.append(("3b. `group-commit` durable-ack p99.9 ≤ 2× fio's 64 KiB append + fdatasync p99.9",
                 f"{fmt(p999, 0)} µs over {fmt(fio_p999, 0)} µs", f"{fmt(over)}×",
                 verdict(over is not None and over <= 2.0)))
    for name, what in (("cpu-append", "1 KiB appends"), ("cpu-durable", "durable (group-commit)")):
        now, before = median(cpu.get((name, "now"), [])), median(cpu.get((name, "before"), []))
        lower = now is not None and before is not None and now < before
        rows.append((f"4. CPU-s per GB, {what}, lower than before the issue",
                     f"{fmt(now)} (before: {fmt(before)})",
                     f"{fmt(now / before if now and before else None)}×",
                     verdict(lower) if before is not None else "not compared"))
    by_records = med("records-20000", "append.records_per_s")
    by_duration = med("duration-5", "append.records_per_s")
    spread = abs(by_records / by_duration - 1) if by_records and by_duration else None
    rows.append(("`--records 20000` and `--duration 5` within 15 %",
                 f"{fmt(by_records, 0)} / {fmt(by_duration, 0)} records/s",
                 f"{fmt(spread * 100 if spread is not None else None, 0)} %",
                 verdict(spread is not None and spread <= 0.15)))
    lines = [f"Medians of {rounds} alternating rounds.", "",
             "| target | figure | ratio | verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seglog")
    parser.add_argument("out", type=Path)
    parser.add_argument("--before")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results, cpu = measure(args, args.out)
    text = table(results, cpu, args.rounds)
    (args.out / "targets.md").write_text(text)
    per_round = {f"{name}-{build}": values for (name, build), values in cpu.items()}
    (args.out / "cpu.json").write_text(json.dumps(per_round, indent=2) + "\n")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
