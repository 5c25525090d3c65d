"""tools/merge_test_records.py: the records of one GPU test pass's shards joined into one."""

import importlib.util
import json
import os

import pytest

_TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "merge_test_records.py")
_spec = importlib.util.spec_from_file_location("merge_test_records", _TOOL)
merge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(merge)


def _shard(tmp_path, index, total, complete=True, passed=2, failed=0, commit="abc1234", backend="default"):
    rec = {"kind": "gpu-tests", "commit": commit, "test_backend": backend, "complete": complete,
           "passed": passed, "failed": failed, "skipped": 1, "shard": {"index": index, "total": total},
           "cases": [{"name": f"Suite.Case{index}", "status": "passed"}]}
    path = tmp_path / f"r.json.shard{index}"
    path.write_text(json.dumps(rec))
    return str(path)


def _merged(tmp_path, paths):
    out = tmp_path / "r.json"
    merge.main(str(out), paths)
    return json.loads(out.read_text())


def test_counts_add_up_and_cases_keep_shard_order(tmp_path):
    paths = [_shard(tmp_path, i, 3, passed=i + 1, failed=i % 2) for i in range(3)]
    rec = _merged(tmp_path, paths)
    assert (rec["passed"], rec["failed"], rec["skipped"]) == (6, 1, 3)
    assert [c["name"] for c in rec["cases"]] == ["Suite.Case0", "Suite.Case1", "Suite.Case2"]
    assert rec["shards"] == 3 and rec["complete"] is True and "shard" not in rec


def test_one_unfinished_shard_makes_the_pass_incomplete(tmp_path):
    paths = [_shard(tmp_path, 0, 2), _shard(tmp_path, 1, 2, complete=False)]
    assert _merged(tmp_path, paths)["complete"] is False


def test_a_missing_shard_record_makes_the_pass_incomplete_and_is_named(tmp_path):
    paths = [_shard(tmp_path, 0, 2), str(tmp_path / "r.json.shard1")]  # shard 1 never wrote one
    rec = _merged(tmp_path, paths)
    assert rec["complete"] is False and rec["shards"] == 2
    assert len(rec["missing_shards"]) == 1 and "shard1" in rec["missing_shards"][0]


def test_shards_of_different_commits_are_refused(tmp_path):
    paths = [_shard(tmp_path, 0, 2), _shard(tmp_path, 1, 2, commit="def5678")]
    with pytest.raises(SystemExit, match="disagree on commit"):
        merge.main(str(tmp_path / "r.json"), paths)


def test_no_readable_record_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="no shard record"):
        merge.main(str(tmp_path / "r.json"), [str(tmp_path / "absent")])
