#!/usr/bin/env python3
"""Turn bench records (bench/results/*.json, kind "bench") into one chart:
time per layer against T for each (backend, weights), with the floor drawn.

    python3 bench/plot.py bench/results/*.json -o bench/latest.png
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", help="bench record files (JSON)")
    ap.add_argument("-o", "--output", default="bench/latest.png")
    args = ap.parse_args()

    series, floors, title = {}, {}, set()
    for path in args.records:
        with open(path) as f:
            rec = json.load(f)
        if rec.get("kind") != "bench":
            continue
        dev = rec["device"]["name"]
        title.add(f'{dev} ({rec["device"]["target"]}), commit {rec["commit"][:8]}')
        # A forced planner (MOEFORGE_SM90_CROSSOVER, MOEFORGE_SM90_DECODE_BT) is part of what was measured.
        planner = rec.get("planner", {})
        crossover, decode_bt = planner.get("sm90_crossover", -1), planner.get("sm90_decode_bt", 0)
        forced = ""
        if crossover >= 0:
            forced += {0: " (wide GEMMs)", 1e9: " (decode GEMMs)"}.get(crossover, f" (crossover {crossover:g})")
        if decode_bt:
            forced += f" (decode tile {decode_bt})"
        for row in rec["rows"]:
            backend = row["backend"] + (forced if row["backend"] == "sm90" else "")
            # FP8 activations change the kernels and the floor (the FP8 GEMM rate): own series.
            fmt = row["weights"] + ("" if row.get("activations", "bf16") == "bf16" else f' x {row["activations"]} acts')
            key = (row["model"], backend, fmt)
            series.setdefault(key, {})[row["T"]] = row["us"]
            floors.setdefault((row["model"], fmt), {})[row["T"]] = row["floor_us"]
    if not series:
        print("no bench records given", file=sys.stderr)
        return 1

    # One colour per (backend, weights) line; floors dashed in gray.
    fig, ax = plt.subplots(figsize=(8, 5))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>p"
    for i, ((model, backend, weights), pts) in enumerate(sorted(series.items())):
        ts = sorted(pts)
        ax.plot(ts, [pts[t] for t in ts], marker=markers[i % len(markers)], color=palette[i % len(palette)],
                label=f"{model} {backend} {weights}")
    for i, ((model, weights), pts) in enumerate(sorted(floors.items())):
        ts = sorted(pts)
        ax.plot(ts, [pts[t] for t in ts], linestyle="--", color="gray", alpha=0.4 + 0.3 * (i % 2),
                label=f"floor: {model}, {weights}" + ("" if "acts" in weights else " weights"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens per batch (T)")
    ax.set_ylabel("µs per layer (median, L2 flushed)")
    ax.set_title("\n".join(sorted(title)), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
