import json
import os
import shutil
import subprocess

import moeforge

KEYS = {"moeforge", "driver", "nvrtc", "supported_targets", "settings", "devices", "cache", "budget", "backend",
        "problems"}


def test_doctor_has_the_cli_keys():
    d = moeforge.doctor(selftest=False)
    assert isinstance(d, dict)
    assert KEYS <= set(d), sorted(KEYS - set(d))
    json.dumps(d)


def test_doctor_same_keys_as_cli_json():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cli = os.environ.get("MOEFORGE_CLI") or os.path.join(root, "build", "moeforge")
    if not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        cli = shutil.which("moeforge")
    if not cli:
        import pytest

        pytest.skip("the moeforge CLI is not built")
    r = subprocess.run([cli, "doctor", "--json", "--no-selftest"], capture_output=True, text=True, timeout=120)
    cli_report = json.loads(r.stdout)
    assert set(moeforge.doctor(selftest=False)) == set(cli_report)


def test_version_matches_doctor():
    assert moeforge.__version__ == moeforge.doctor(selftest=False)["moeforge"]
