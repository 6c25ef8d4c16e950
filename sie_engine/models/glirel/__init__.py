"""GLiREL relation extraction: layout (checkpoint.py), prompt (prompt.py), head (head.py); the
task side is sie_engine/tasks/relations.py."""
