#!/usr/bin/env python3
"""Where a kernel's warps wait, instruction by instruction, from ncu's source page.

    ncu -o rep --set full --import-source no -k <kernel> -c <n> <command>
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python3 tools/ncu_source_top.py rep.csv [--kernel K] [--top N]

Prints, for the K-th profiled kernel in the file (0-based), the share of each stall reason
over all warp samples, then the N instructions holding the most samples with their three
largest reasons. The per-kernel totals of `smsp__average_warps_issue_stalled_*` say how long
warps wait; this says on which instruction (e.g. a WARPGROUP.DEPBAR is a wgmma group, a
BRA after SYNCS.PHASECHK an mbarrier, a PRMT after an LDS a shared load).
"""
import argparse
import collections
import csv


def kernels(path):
    """[(name, header, rows)] in file order: the csv repeats a header block per kernel."""
    out = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                out.append([row[1], None, []])
            elif row[0] == "Address":
                out[-1][1] = row
            elif out:
                out[-1][2].append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--kernel", type=int, default=0, help="which profiled kernel (0-based, file order)")
    ap.add_argument("--top", type=int, default=25, help="instructions to list")
    a = ap.parse_args()
    found = kernels(a.csv)
    if a.kernel >= len(found):
        raise SystemExit(f"{a.csv}: {len(found)} kernel(s) profiled, no kernel {a.kernel}")
    name, header, rows = found[a.kernel]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = lambda r: int(r[col["# Samples"]] or 0)
    total = sum(samples(r) for r in rows) or 1
    by_reason = collections.Counter()
    for r in rows:
        for h in reasons:
            by_reason[h] += int(r[col[h]] or 0)
    print(f"{name}: {len(rows)} instructions, {total} warp samples")
    print("  " + "  ".join(f"{h[6:]} {100 * v / total:.1f}%" for h, v in by_reason.most_common(10)))
    for r in sorted(rows, key=samples, reverse=True)[: a.top]:
        top3 = sorted(((int(r[col[h]] or 0), h[6:]) for h in reasons), reverse=True)[:3]
        why = " ".join(f"{h}:{v}" for v, h in top3 if v)
        print(f"{100 * samples(r) / total:5.1f}%  {r[col['Source']].strip()[:64]:<64} {why}")


if __name__ == "__main__":
    main()
