#!/usr/bin/env python3
"""Target 5b's comparison, measured so that the VM's drift cancels: appends into tmpfs with one
engine shard and two (`seglog bench --workload append --shards N`) beside fio writing fresh
tmpfs pages with one job and two, in ROUNDS rounds, each round in the order
engine-1, fio-1, engine-2, fio-2 and the next in the reverse order (ABBA), each run after the
wait for free page reporting that `seglog bench` does itself (tools/src/bench/settle.rs). fio
runs with --fallocate=none: its writes allocate their pages as the engine's appends do (fio's
default fallocates the whole file first, outside its timed writes).

Around every run it reads /proc/stat, so each run also says how busy the cores were (user,
system, steal, idle, CPU-seconds) and what a GB written cost in CPU-seconds; with --perf it also
samples every CPU (`perf record -a`) and splits that cost into the kernel's copy into the page
cache (copy_folio_from_iter_atomic) and everything else (the engine's own work, the rest of the
kernel's write path, process start and exit): the profile behind the figure. Where the copy's
cost per GB rises from one writer to two for fio as for the engine while the rest stays, the
scaling is limited by the machine's memory, not by the engine.

Prints a Markdown table and a summary (medians; per round the two-over-one ratios of the
engine and of fio, and the engine over fio at one writer and at two), and writes every figure
to OUT_DIR/tmpfs-scaling.json. Standard library only; fio and (with --perf) perf must be
installed.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TMPFS = Path("/dev/shm")
REPORTED_KIB = Path("/sys/module/page_reporting/parameters/reported_kib")
SETTLE_QUIET_S = 4.0
SETTLE_MAX_S = 120.0
COPY_SYMBOL = "copy_folio_from_iter_atomic"
PERF_HZ = 499
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def settle():
    """Waits until free page reporting's count stood still for 4 s (at most 120 s)."""
    if not REPORTED_KIB.exists():
        return 0.0
    begin = time.monotonic()
    last, quiet_since = REPORTED_KIB.read_text(), time.monotonic()
    while time.monotonic() - quiet_since < SETTLE_QUIET_S:
        if time.monotonic() - begin > SETTLE_MAX_S:
            break
        time.sleep(0.1)
        now = REPORTED_KIB.read_text()
        if now != last:
            last, quiet_since = now, time.monotonic()
    return time.monotonic() - begin


def cpu_ticks():
    """The all-CPU line of /proc/stat: user, nice, system, idle, iowait, irq, softirq, steal."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
    return [int(field) for field in fields]


def cpu_seconds(before, after):
    user, nice, system, idle, iowait, irq, softirq, steal = (
        (b - a) / CLOCK_TICKS_PER_S for a, b in zip(before, after))
    return {
        "user_s": round(user + nice, 3),
        "system_s": round(system + irq + softirq, 3),
        "steal_s": round(steal, 3),
        "idle_s": round(idle + iowait, 3),
        "busy_s": round(user + nice + system + irq + softirq, 3),
    }


def engine_command(seglog, writers, seconds, scratch, json_path):
    return [seglog, "bench", "--workload", "append", "--duration", str(seconds),
            "--shards", str(writers), "--dir", str(scratch),
            "--json", str(json_path)]


def fio_command(writers, seconds, scratch, json_path):
    return ["fio", "--name=tmpfs-write", f"--directory={scratch}", "--rw=write", "--bs=256k",
            "--size=8g", f"--numjobs={writers}", f"--runtime={seconds}", "--group_reporting",
            "--ioengine=psync", "--fallocate=none", "--output-format=json",
            f"--output={json_path}"]


def written(who, json_path):
    """(bytes written, seconds of the writing) from the run's own JSON."""
    report = json.loads(json_path.read_text())
    if who == "engine":
        append = report["append"]
        seconds = append["records"] / append["records_per_s"]
        return append["mb_per_s"] * 1e6 * seconds, seconds
    write = report["jobs"][0]["write"]
    return write["io_bytes"], write["runtime"] / 1000


def copy_cpu_seconds(perf_data):
    """CPU-seconds (every CPU) in the kernel's copy into the page cache: its samples at
    PERF_HZ."""
    report = subprocess.run(
        ["perf", "report", "-i", str(perf_data), "--no-children", "--sort", "sym", "-g", "none",
         "-n", "--stdio"], capture_output=True, text=True, check=True).stdout
    for line in report.splitlines():
        if line.rstrip().endswith(COPY_SYMBOL):
            return int(line.split()[1]) / PERF_HZ
    return 0.0


def measure(who, writers, round_number, args, work):
    scratch = TMPFS / "seglog-tmpfs-scaling"
    shutil.rmtree(scratch, ignore_errors=True)
    settled_s = settle()
    scratch.mkdir()
    json_path = work / f"{who}-{writers}-{round_number}.json"
    command = (engine_command(args.seglog, writers, args.seconds, scratch, json_path)
               if who == "engine" else fio_command(writers, args.seconds, scratch, json_path))
    perf_data = work / f"{who}-{writers}-{round_number}.perf"
    if args.perf:
        command = ["perf", "record", "-q", "-a", "--no-buildid", "-F", str(PERF_HZ), "-o",
                   str(perf_data), "--"] + command
    ticks_before, begin = cpu_ticks(), time.monotonic()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall_s, ticks_after = time.monotonic() - begin, cpu_ticks()
    shutil.rmtree(scratch, ignore_errors=True)
    bytes_written, writing_s = written(who, json_path)
    gb = bytes_written / 1e9
    run = {
        "who": who, "writers": writers, "round": round_number,
        "mb_per_s": round(bytes_written / writing_s / 1e6, 1),
        "gb": round(gb, 3), "writing_s": round(writing_s, 3), "wall_s": round(wall_s, 3),
        "settle_s": round(settled_s, 1),
        **cpu_seconds(ticks_before, ticks_after),
    }
    run["busy_s_per_gb"] = round(run["busy_s"] / gb, 3)
    if args.perf:
        run["copy_s_per_gb"] = round(copy_cpu_seconds(perf_data) / gb, 3)
        run["other_s_per_gb"] = round(run["busy_s_per_gb"] - run["copy_s_per_gb"], 3)
        perf_data.unlink()
    return run


def order(round_number):
    runs = [("engine", 1), ("fio", 1), ("engine", 2), ("fio", 2)]
    return runs if round_number % 2 else runs[::-1]


def mb_per_s(runs, who, writers, round_number):
    return next(run["mb_per_s"] for run in runs
                if (run["who"], run["writers"], run["round"]) == (who, writers, round_number))


def summary(runs, rounds):
    """Per round: two over one for each writer, the engine over fio at one and at two."""
    per_round = []
    for round_number in range(1, rounds + 1):
        mb = {(who, writers): mb_per_s(runs, who, writers, round_number)
              for who in ("engine", "fio") for writers in (1, 2)}
        per_round.append({
            "round": round_number,
            "engine_two_over_one": mb[("engine", 2)] / mb[("engine", 1)],
            "fio_two_over_one": mb[("fio", 2)] / mb[("fio", 1)],
            "engine_over_fio_one": mb[("engine", 1)] / mb[("fio", 1)],
            "engine_over_fio_two": mb[("engine", 2)] / mb[("fio", 2)],
        })
    medians = {key: round(statistics.median(r[key] for r in per_round), 3)
               for key in per_round[0] if key != "round"}
    for who in ("engine", "fio"):
        for writers in (1, 2):
            for key in ("mb_per_s", "busy_s_per_gb", "copy_s_per_gb", "other_s_per_gb",
                        "steal_s", "idle_s"):
                values = [run[key] for run in runs
                          if (run["who"], run["writers"]) == (who, writers) and key in run]
                if values:
                    medians[f"{who}_{writers}_{key}"] = round(statistics.median(values), 3)
    return per_round, medians


def print_tables(runs, per_round, medians):
    print("| round | writer | MB/s | GB | busy CPU-s | system CPU-s | steal s | idle s "
          "| busy CPU-s/GB | copy CPU-s/GB | the rest, CPU-s/GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        name = f"{run['who']} {run['writers']} {'shard' if run['who'] == 'engine' else 'job'}"
        print(f"| {run['round']} | {name}{'s' if run['writers'] > 1 else ''} "
              f"| {run['mb_per_s']:.0f} | {run['gb']:.2f} | {run['busy_s']:.2f} "
              f"| {run['system_s']:.2f} | {run['steal_s']:.2f} | {run['idle_s']:.2f} "
              f"| {run['busy_s_per_gb']:.2f} | {run.get('copy_s_per_gb', '–')} "
              f"| {run.get('other_s_per_gb', '–')} |")
    print()
    print("| round | engine two over one | fio two over one | engine over fio, one "
          "| engine over fio, two |")
    print("|---|---|---|---|---|")
    for r in per_round:
        print(f"| {r['round']} | {r['engine_two_over_one']:.2f} | {r['fio_two_over_one']:.2f} "
              f"| {r['engine_over_fio_one']:.2f} | {r['engine_over_fio_two']:.2f} |")
    print(f"| median | {medians['engine_two_over_one']:.2f} | {medians['fio_two_over_one']:.2f} "
          f"| {medians['engine_over_fio_one']:.2f} | {medians['engine_over_fio_two']:.2f} |")
    if "engine_1_copy_s_per_gb" in medians:
        print()
        print("| medians, CPU-s per GB | engine 1 shard | engine 2 shards | fio 1 job "
              "| fio 2 jobs |")
        print("|---|---|---|---|---|")
        for key, name in (("copy_s_per_gb", f"the kernel's copy ({COPY_SYMBOL})"),
                          ("other_s_per_gb", "everything else"),
                          ("busy_s_per_gb", "all busy")):
            cells = " | ".join(f"{medians[f'{who}_{writers}_{key}']:.2f}"
                               for who in ("engine", "fio") for writers in (1, 2))
            print(f"| {name} | {cells} |")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seglog", help="the seglog binary (target/release/seglog)")
    parser.add_argument("rounds", type=int)
    parser.add_argument("out", type=Path, help="directory for tmpfs-scaling.json")
    parser.add_argument("--perf", action="store_true", help="sample every CPU with perf")
    parser.add_argument("--seconds", type=float, default=4, help="each run's writing time")
    return parser.parse_args(argv[1:])


def main(argv):
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="tmpfs-scaling-") as work:
        for round_number in range(1, args.rounds + 1):
            for who, writers in order(round_number):
                run = measure(who, writers, round_number, args, Path(work))
                print(f"round {round_number}: {who} {writers}: {run['mb_per_s']:.0f} MB/s",
                      file=sys.stderr)
                runs.append(run)
    per_round, medians = summary(runs, args.rounds)
    print_tables(runs, per_round, medians)
    result = {"seconds": args.seconds, "rounds": args.rounds, "runs": runs,
              "per_round": per_round, "medians": medians}
    (args.out / "tmpfs-scaling.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv)
