"""The rendered chart scanned by checkov (the chart-scanning tool security teams run).

Every check passes except the few that are choices with safe defaults a chart cannot make for its
user; each of those is named and justified in docs/deploy.md, and the hardened values that satisfy
them (a pinned digest, pull policy Always, CPU limits) are shown to pass every check.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from helm_tools import REPO_ROOT, checkov_binary, run_helm

CHART = REPO_ROOT / "helm"
# Failing by default, on purpose (docs/deploy.md, "Security scan", says why for each).
JUSTIFIED = {
    "CKV_K8S_11",  # CPU limits: throttling inflates inference latency; requests reserve the cores
    "CKV_K8S_15",  # pull policy Always: pointless with a fixed tag or digest, and a registry outage stops restarts
    "CKV_K8S_43",  # image digest: the chart cannot know the digest of the image a user builds
}
VALUES = {"default": [], "small": ["-f", str(CHART / "values-small.yaml")],
          "gpu": ["-f", str(CHART / "values-gpu.yaml")],
          # queue mode with the chart's own NATS, the admin key and config dir, a spot pool
          "spot": ["-f", str(CHART / "values-gpu.yaml"), "-f", str(CHART / "values-spot.yaml"), "--set",
                   "admin.value=a"]}
DIGEST = "sha256:" + "0" * 64


HARDENED = {
    "image": {"digest": DIGEST, "pullPolicy": "Always"},
    "router": {"resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                             "limits": {"cpu": "1", "memory": "512Mi"}}},
    "pools": [{"name": "cpu", "device": "cpu", "preload": ["sentence-transformers/all-MiniLM-L6-v2"],
               "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "6Gi"}}}],
}


@pytest.fixture(scope="module")
def failed_checks(tmp_path_factory) -> dict[str, set[tuple[str, str]]]:
    """The failed (check, resource) pairs of each rendering, all scanned by one checkov run: its
    start-up is most of a scan's time."""
    checkov = checkov_binary()
    hardened = tmp_path_factory.mktemp("values") / "hardened.yaml"
    hardened.write_text(yaml.safe_dump(HARDENED))
    renderings = {**VALUES, "hardened": ["-f", str(hardened)]}
    folder = tmp_path_factory.mktemp("rendered")
    for name, helm_args in renderings.items():
        done = run_helm("template", "sie", str(CHART), "--namespace", "sie", "--set", "apiKey.value=k", *helm_args)
        assert done.returncode == 0, done.stderr
        (folder / f"{name}.yaml").write_text(done.stdout)
    scan = subprocess.run([str(checkov), "-d", str(folder), "--framework", "kubernetes", "-o", "json",
                           "--skip-download"], capture_output=True, text=True, timeout=300)
    assert scan.returncode in (0, 1), scan.stderr  # 1: some check failed
    reports = json.loads(scan.stdout)
    failed: dict[str, set[tuple[str, str]]] = {name: set() for name in renderings}
    passed: dict[str, int] = dict.fromkeys(renderings, 0)
    for report in reports if isinstance(reports, list) else [reports]:
        if isinstance(report, dict) and "results" in report:
            for check in report["results"]["failed_checks"]:
                failed[Path(check["file_path"]).stem].add((check["check_id"], check["resource"]))
            for check in report["results"]["passed_checks"]:
                passed[Path(check["file_path"]).stem] += 1
    assert all(count > 100 for count in passed.values()), passed  # the scan really ran over each rendering
    return failed


@pytest.mark.parametrize("values", list(VALUES))
def test_only_justified_checks_fail(failed_checks, values):
    unexpected = sorted(f for f in failed_checks[values] if f[0] not in JUSTIFIED)
    assert not unexpected, unexpected


def test_each_justified_check_is_explained_in_the_deploy_guide():
    guide = (REPO_ROOT / "docs" / "deploy.md").read_text()
    section = guide[guide.index("### Security scan"):]
    for check in JUSTIFIED:
        assert re.search(rf"`{check}`", section), f"docs/deploy.md does not explain {check}"


def test_hardened_values_pass_every_check(failed_checks):
    assert failed_checks["hardened"] == set()
