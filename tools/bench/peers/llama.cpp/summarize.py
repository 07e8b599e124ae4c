#!/usr/bin/env python3
"""summarize.py DIR: the table of a tools/bench/peers/llama.cpp/run race.

Reads DIR/CONFIG_TEST_ENGINE_REP.json (measure.py records: llama-bench -o json or waste bench
--json on stdout) and DIR/NAME.io.json (disk bytes read, cgroup peak) and prints, per config and
test, one row per rep: llama.cpp tok/s, this engine's tok/s per path and the ratio this engine /
llama.cpp within the rep, then the medians. Standard library only."""
import glob
import json
import os
import re
import statistics
import sys

CONFIGS = ["cached", "floor", "floor1g"]
TESTS = {"tg": "decode 128", "pp": "prefill 512"}
ENGINES = ["llama", "resident", "iod"]
LABEL = {"llama": "llama.cpp", "resident": "waste resident", "iod": "waste iod"}


def parse(path):
    m = re.match(r"(cached|floor1g|floor)_(tg|pp)_(llama|resident|iod)_(\d+)\.json$", os.path.basename(path))
    if not m:
        return None
    cfg, test, eng, rep = m.group(1), m.group(2), m.group(3), int(m.group(4))
    r = json.load(open(path))
    x = dict(cfg=cfg, test=test, eng=eng, rep=rep, rc=r["rc"], tps=None,
             load=r["loadavg_before"].split()[0], peak=r["total_peak"], note="",
             others=r.get("other_cpu_s", 0) / max(1e-9, r["wall_s"]))
    for line in r["stderr"].splitlines():
        if "File system inputs" in line:  # /usr/bin/time -v: 512-byte blocks
            x["read_fs"] = int(line.split(":")[1]) * 512
    io_path = path[:-5] + ".io.json"
    if os.path.exists(io_path):
        io = json.load(open(io_path))
        x["cg_peak"] = io["cgroup_max_usage"]
        x["read_all"] = io.get("disk_read_bytes_all", io.get("disk_read_bytes"))
        x["failcnt"] = io["cgroup_failcnt"]
    if r["rc"] != 0:
        x["note"] = f"rc {r['rc']}: " + r["stderr"].strip().splitlines()[-1][:80] if r["stderr"].strip() else f"rc {r['rc']}"
        return x
    try:
        j = json.loads(r["stdout"])
    except json.JSONDecodeError:
        x["note"] = "no JSON on stdout"
        return x
    if eng == "llama":
        t = j[0]
        x["tps"] = t["avg_ts"]
        x["note"] = f"{t['n_threads']} threads"
        x["read"] = x.get("read_fs")
    else:
        x["tps"] = j["prefill"]["tok_per_s"] if test == "pp" else j["tok_per_s"]
        x["read"] = j["prefill"]["bytes_read"] if test == "pp" else j["bytes_read"]
        ex = j["experts"]
        hits = j["prefill"]["hits"] if test == "pp" else j["hits"]
        miss = j["prefill"]["misses"] if test == "pp" else j["misses"]
        x["note"] = ("resident" if "resident" in ex else ex.split(", ")[-1]) + \
            (f", hits {hits / max(1, hits + miss):.0%}" if "resident" not in ex else "")
        if test == "tg":
            x["ms"] = j["ms_per_token"]
        else:
            x["ms"] = {k: v / j["prefill"]["tokens"] for k, v in j["prefill"]["ms"].items()}
    return x


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: summarize.py DIR (the out directory of a race)")
    d = sys.argv[1]
    runs = [x for x in (parse(p) for p in sorted(glob.glob(os.path.join(d, "*.json")))) if x]
    if not runs:
        sys.exit(f"summarize.py: no race records in {d}")
    by = {(x["cfg"], x["test"], x["eng"], x["rep"]): x for x in runs}
    reps = sorted({x["rep"] for x in runs})
    lim = os.path.join(d, "setup.txt")
    if os.path.exists(lim):
        print(open(lim).read().rstrip())
        print()
    print("| config | test | rep | llama.cpp tok/s | waste resident tok/s | ratio | waste iod tok/s | ratio | "
          "MB read (llama: process, time -v; iod: timed part) | cgroup peak MiB (llama / iod) | load1 before (llama / res / iod) | "
          "cores busy with other work (llama / res / iod) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    med = {}
    for cfg in CONFIGS:
        for test in TESTS:
            for rep in reps:
                row = {e: by.get((cfg, test, e, rep)) for e in ENGINES}
                if not any(row.values()):
                    continue
                lt = row["llama"]["tps"] if row["llama"] else None

                def tps(e):
                    x = row[e]
                    if not x:
                        return "-"
                    return f"{x['tps']:.2f}" if x["tps"] else f"failed ({x['note']})"

                def ratio(e):
                    x = row[e]
                    if not x or not x["tps"] or not lt:
                        return "-"
                    med.setdefault((cfg, test, e), []).append(x["tps"] / lt)
                    return f"**{x['tps'] / lt:.2f}x**"

                def pair(key, scale):
                    v = [row[e].get(key) if row[e] else None for e in ("llama", "iod")]
                    return " / ".join("-" if a is None else f"{a / scale:.0f}" for a in v)

                loads = " / ".join(row[e]["load"] if row[e] else "-" for e in ENGINES)
                others = " / ".join(f"{row[e]['others']:.2f}" if row[e] else "-" for e in ENGINES)
                print(f"| {cfg} | {TESTS[test]} | {rep} | {tps('llama')} | {tps('resident')} | {ratio('resident')} | "
                      f"{tps('iod')} | {ratio('iod')} | {pair('read', 1e6)} | {pair('cg_peak', 2**20)} | {loads} | "
                      f"{others} |")
    print()
    for (cfg, test, e), v in med.items():
        lt = [by[(cfg, test, 'llama', r)]["tps"] for r in reps if by.get((cfg, test, 'llama', r)) and by[(cfg, test, 'llama', r)]["tps"]]
        et = [by[(cfg, test, e, r)]["tps"] for r in reps if by.get((cfg, test, e, r)) and by[(cfg, test, e, r)]["tps"]]
        print(f"{cfg} {TESTS[test]}: {LABEL[e]} / llama.cpp = {statistics.median(v):.2f}x (median of {len(v)} per-rep "
              f"ratios, range {min(v):.2f}-{max(v):.2f}); tok/s medians {statistics.median(et):.2f} vs "
              f"{statistics.median(lt):.2f}; best runs {max(et):.2f} vs {max(lt):.2f} = {max(et) / max(lt):.2f}x")
    print()
    print("this engine's ms per token by phase (median over reps):")
    for cfg in CONFIGS:
        for test in TESTS:
            for e in ("resident", "iod"):
                ms = [by[k]["ms"] for k in by if k[:3] == (cfg, test, e) and "ms" in by[k]]
                if ms:
                    keys = [k for k in ms[0] if statistics.median(m[k] for m in ms) >= 0.05]
                    print(f"  {cfg} {TESTS[test]} {LABEL[e]}: " +
                          " ".join(f"{k} {statistics.median(m[k] for m in ms):.2f}" for k in keys))


if __name__ == "__main__":
    main()
