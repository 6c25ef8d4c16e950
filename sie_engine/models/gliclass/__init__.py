"""GLiClass zero-shot classification: layout (checkpoint.py), head (head.py); the task side is
sie_engine/tasks/gliclass.py."""
