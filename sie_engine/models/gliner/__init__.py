"""GLiNER: its checkpoint layout and config (checkpoint.py, no head imported), prompt and windows
(prompt.py), span and token heads (layers.py, head.py) and decoding (decode.py). The extract
mode that drives it is sie_engine/tasks/extract.py."""
