import os
import sys
from pathlib import Path

TESTS = Path(__file__).parent
# Tests in every folder import the shared helper modules (tiny_models, server_fixtures, ...) from
# tests/helpers by their bare names, and a few reference builders from the family and head tests
# (test_gliner_extract.build_reference, test_gliner_deberta.tiny_deberta, test_zeroshot_nli._bert_nli,
# test_import_graph.imports_of, test_score_http.DOCS, ...)
# that the HTTP, framework and catalog tests reuse.
for folder in ("helpers", "engine/heads", "engine/families", "engine/tasks", "project", "server"):
    sys.path.insert(0, str(TESTS / folder))
# tests/plugins: the fixture packages the plug-in tests register (`plugins.toy_mode`, `plugins.toy_family`);
# last, so the test folders never shadow an installed package
sys.path.append(str(TESTS))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The suite runs more busy processes than cores (xdist workers, their servers, Ray's actors):
# OpenMP threads that spin-wait between torch's parallel regions then burn the CPU the others
# need (measured: about a sixth more CPU on the family tests). Passive waiting yields it. Set
# before torch is imported; servers, zygotes and actors inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The suite starts hundreds of interpreters (xdist workers, servers, README examples, Ray
# workers, CLI runs): where the environment says PYTHONDONTWRITEBYTECODE (these machines do), each
# compiled SIE's modules and pytest rewrote every test module afresh (collection alone: 27 CPU-s a
# worker against 18 with the caches). Bytecode goes to __pycache__ (ignored by git), as Python's default.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
