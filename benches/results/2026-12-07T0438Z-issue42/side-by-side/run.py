import json, resource, subprocess, sys, tempfile
builds = {"before": "/work/target-before/release/seglog", "now": "/work/main/target/release/seglog"}
rows = []
for rnd in range(3):
    for name, exe in (builds.items() if rnd % 2 == 0 else reversed(list(builds.items()))):
        for wl in ["group-commit", "append"]:
            with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                out = f"/tmp/sbs/{name}-{wl}-{rnd}.json"
                subprocess.run([exe, "bench", "--workload", wl, "--duration", "5", "--dir", d + "/d", "--json", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            r = json.load(open(out))
            phase = "durable" if wl == "group-commit" else "append"
            p = r[phase] if phase in r else r.get("phases", {}).get(phase)
            mbps = p.get("mb_per_s") if isinstance(p, dict) else None
            gb = p["records"] * 1024 / 1e9 if isinstance(p, dict) else None
            rows.append((rnd, name, wl, mbps, gb, cpu, cpu / gb if gb else None))
            print(rows[-1], flush=True)
