"""GLiNER2: layout (checkpoint.py), prompt and schemas (prompt.py), heads (head.py); the task
side is sie_engine/tasks/gliner2.py."""
