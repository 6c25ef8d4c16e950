"""The gliclass family (see sie_engine/models/__init__.py for what a family package holds)."""
