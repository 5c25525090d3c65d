#!/usr/bin/env python3
"""Joins the gpu-tests records of one pass's shards (run_all.sh MOEFORGE_TEST_SHARDS) into one.

    merge_test_records.py OUT SHARD_RECORD...

The header (commit, device, planner, knobs) is the first shard's; every shard must agree on the
commit and the test backend. Counts add up, cases are concatenated in shard order, the record is
complete only if every shard completed, and "shards" says how many there were. A missing shard
record (a process that died before its first test ended) makes the joined record incomplete."""
import json
import sys


def main(out, paths):
    records, missing = [], []
    for p in paths:
        try:
            with open(p) as f:
                records.append(json.load(f))
        except (OSError, ValueError) as e:
            missing.append(f"{p}: {e}")
    if not records:
        sys.exit(f"merge_test_records: no shard record could be read ({'; '.join(missing)})")
    head = dict(records[0])
    for r in records[1:]:
        for key in ("commit", "test_backend", "kind"):
            if r.get(key) != head.get(key):
                sys.exit(f"merge_test_records: shards disagree on {key}: {head.get(key)!r} vs {r.get(key)!r}")
    totals = {r["shard"]["total"] for r in records if "shard" in r}
    head.pop("shard", None)
    head["shards"] = max(totals) if totals else len(paths)
    head["complete"] = all(r.get("complete") for r in records) and len(records) == head["shards"]
    for key in ("passed", "failed", "skipped"):
        head[key] = sum(r.get(key, 0) for r in records)
    head["cases"] = [c for r in records for c in r.get("cases", [])]
    if missing:
        head["missing_shards"] = missing
    with open(out, "w") as f:
        json.dump(head, f, indent=2)
        f.write("\n")
    print(f"{head['shards']} shards: {head['passed']} passed, {head['failed']} failed, {head['skipped']} skipped, "
          f"complete: {head['complete']}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
