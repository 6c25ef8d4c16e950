#!/bin/bash
# The declared minimum versions of the databases and frameworks (pyproject's extras), installed
# together in a venv of their own, with the adapter and framework tests run against them.
# A manual check (a few minutes, mostly pip): run it from the checkout's root before changing
# a floor. CI tests the newest releases only.
#
#   tests/integrations/check_floors.sh [venv dir, default .venv-floors]
set -euo pipefail
VENV=${1:-.venv-floors}
FLOORS=(chromadb==1.2.1 qdrant-client==1.17.0 weaviate-client==4.16.0 lancedb==0.24.2
        langchain-core==1.0.0 llama-index-core==0.14.0 haystack-ai==2.18.0)
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -c constraints/cpu.txt ".[server,dev]" "${FLOORS[@]}"
"$VENV/bin/pip" list 2>/dev/null | grep -iE "^(chromadb|qdrant-client|weaviate-client|lancedb|langchain-core|langchain-qdrant|llama-index-core|llama-index-vector-stores-chroma|haystack-ai|qdrant-haystack) "
# From outside the checkout, so the venv's installed copy of SIE is the one tested.
cd tests/integrations && "../../$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  test_integration_chroma.py test_integration_qdrant.py test_integration_weaviate.py test_integration_lancedb.py \
  test_images_databases.py test_integration_langchain.py test_integration_llamaindex.py test_integration_haystack.py
