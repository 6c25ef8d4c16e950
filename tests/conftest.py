import os
import sys
from pathlib import Path

# Tests import helper modules (tiny_models, server fixtures) from this folder.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
