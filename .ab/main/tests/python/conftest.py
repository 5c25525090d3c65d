"""Shared test setup. With MOEFORGE_PY_TESTS_JSON set, the run is recorded as a
"gpu-tests" result record (DESIGN.md "Result records"): commit (MOEFORGE_COMMIT),
date, device, passed, failed, skipped and every case."""

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # numpy_reference

_cases = []


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = report.outcome
        if report.when == "setup" and outcome == "failed":
            outcome = "error"
        _cases.append({"case": report.nodeid, "outcome": outcome, "seconds": round(report.duration, 3)})


def pytest_collectreport(report):
    # A module that skips itself (no torch / no GPU) or fails to import is a case too.
    if report.outcome == "skipped":
        _cases.append({"case": report.nodeid, "outcome": "skipped", "seconds": 0.0})
    elif report.outcome == "failed":
        _cases.append({"case": report.nodeid, "outcome": "error", "seconds": 0.0})


def _device():
    try:
        import moeforge

        d = moeforge.doctor(selftest=False)
        devs = d.get("devices") or []
        dev = dict(devs[0]) if devs else {}
        drv, nvrtc = d.get("driver") or {}, d.get("nvrtc") or {}
        return {"name": dev.get("name", "none"), "target": dev.get("target", ""),
                "driver": drv.get("version", drv.get("message", "")) if isinstance(drv, dict) else drv,
                "nvrtc": nvrtc.get("version", "") if isinstance(nvrtc, dict) else nvrtc,
                "moeforge": d.get("moeforge")}
    except Exception as e:  # the record must still be written
        return {"name": "unknown", "error": str(e)}


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("MOEFORGE_PY_TESTS_JSON")
    if not path:
        return
    try:
        import torch

        torch_version = torch.__version__
    except Exception:
        torch_version = None
    record = {
        "kind": "gpu-tests",
        "suite": "python",
        "commit": os.environ.get("MOEFORGE_COMMIT", "unknown"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": _device(),
        "python": sys.version.split()[0],
        "torch": torch_version,
        "passed": sum(c["outcome"] == "passed" for c in _cases),
        "failed": sum(c["outcome"] in ("failed", "error") for c in _cases),
        "skipped": sum(c["outcome"] == "skipped" for c in _cases),
        "exit_status": int(exitstatus),
        "cases": _cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
