#!/usr/bin/env python3
"""Where a forward's time goes, kernel by kernel, from an ncu metrics CSV.

    ncu --csv --print-units base --clock-control none --metrics <run_all.sh's list> <command> > k.csv
    python3 tools/ncu_kernel_table.py k.csv <label> [--by-name]

Default: the last forward only (from the last moe_route launch on: the earlier kernels are
warm-up runs and, with `auto`, the self-test), one line a launch. --by-name: every launch,
one line per kernel name with its median (e.g. the cuBLAS GEMMs of the bench's ceilings).
Columns: time, share, tensor-pipe active %, DRAM %, L2 hit %, L2 throughput %, L1 / shared-
memory throughput %, issue-active %, grid, the busiest SM's active cycles over the average SM's
(1.0 = the grid's work landed evenly; a persistent grid with 160 equal items on 132 SMs gives
~1.6), and the SM clock while the kernel ran (elapsed cycles over its time, GHz).
"""
import argparse
import collections
import csv
import statistics


def launches(path):
    """{launch id: {"name": kernel, metric: value}} in file order."""
    rows = [r for r in csv.reader(line for line in open(path) if line.startswith('"'))]
    head, data = rows[0], rows[1:]
    ix = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    out = collections.OrderedDict()
    for r in data:
        d = out.setdefault(r[ix["ID"]], {"name": r[ix["Kernel Name"]]})
        d[r[ix["Metric Name"]]] = r[ix["Metric Value"]].replace(",", "")
    return out


def num(d, key):
    try:
        return float(d.get(key, "") or "nan")
    except ValueError:
        return float("nan")


COLUMNS = [  # (header, width, metric, format)
    ("tensor%", 9, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "{:.2f}"),
    ("dram%", 7, "dram__throughput.avg.pct_of_peak_sustained_elapsed", "{:.2f}"),
    ("L2hit%", 8, "lts__t_sector_hit_rate.pct", "{:.2f}"),
    ("L2%", 7, "lts__throughput.avg.pct_of_peak_sustained_elapsed", "{:.2f}"),
    ("L1smem%", 9, "l1tex__throughput.avg.pct_of_peak_sustained_active", "{:.2f}"),
    ("issue%", 8, "smsp__issue_active.avg.pct_of_peak_sustained_active", "{:.2f}"),
    ("grid", 8, "launch__grid_size", "{:.0f}"),
]


def derived(d):
    """The SM-imbalance and clock columns of one launch (or of medians)."""
    avg, mx = num(d, "sm__cycles_active.avg"), num(d, "sm__cycles_active.max")
    t, elapsed = num(d, "gpu__time_duration.sum"), num(d, "sm__cycles_elapsed.avg")
    imb = f"{mx / avg:.2f}" if avg > 0 else "-"
    ghz = f"{elapsed / t:.2f}" if t > 0 and elapsed > 0 else "-"
    return imb, ghz


def cell(d, metric, fmt):
    v = num(d, metric)
    return "-" if v != v else fmt.format(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("label")
    ap.add_argument("--by-name", action="store_true", help="every launch, medians per kernel name")
    a = ap.parse_args()
    k = launches(a.csv)
    if a.by_name:
        groups = collections.OrderedDict()
        for d in k.values():
            groups.setdefault(d["name"], []).append(d)
        lines = []
        for name, ds in groups.items():
            keys = {m for d in ds for m in d if m != "name"}
            med = {m: str(statistics.median(num(d, m) for d in ds)) for m in keys}
            med["name"] = f"{name} (x{len(ds)})"
            lines.append(med)
        what = f"{len(k)} launches, {len(lines)} kernels, medians"
    else:
        ids = list(k)
        last = max([i for i, key in enumerate(ids) if k[key]["name"].startswith("moe_route")] or [0])
        lines = [k[key] for key in ids[last:]]
        what = f"last forward, {len(lines)} kernels"
    total = sum(num(d, "gpu__time_duration.sum") for d in lines)
    print(f"-- T={a.label}: {what}, {total / 1e3:.1f} us of kernel time (ncu, serialized)")
    width = 64 if a.by_name else 24
    print(f"   {'kernel':<{width}}{'us':>10}{'share':>8}" + "".join(f"{h:>{w}}" for h, w, _, _ in COLUMNS) +
          f"{'SMmax/avg':>10}{'GHz':>6}")
    for d in lines:
        t = num(d, "gpu__time_duration.sum")
        imb, ghz = derived(d)
        print(f"   {d['name'][:width]:<{width}}{t / 1e3:>10.1f}{100 * t / max(total, 1):>7.1f}%" +
              "".join(f"{cell(d, m, f):>{w}}" for _, w, m, f in COLUMNS) + f"{imb:>10}{ghz:>6}")


if __name__ == "__main__":
    main()
