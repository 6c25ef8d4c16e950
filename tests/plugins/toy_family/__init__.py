"""A model family SIE does not ship, in its own folder: a tiny backbone (`model.py`), its own dense
head (`head.py`) and a card-less checkpoint layout (`layout.py`: a directory with `toy_config.json`).

`register()` is the one registry entry a user of it adds (tests/engine/families/test_family_plugin.py calls it);
nothing outside this folder names the family.
"""

from __future__ import annotations

PACKAGE = __name__
NAME = "toy"


def register() -> None:
    """Register the family, its architecture string and its layout (asked after the built-in ones)."""
    from sie_engine.models import register_family, register_layout

    register_family(NAME, f"{PACKAGE}.model:FAMILY", architectures=["ToyModel"], model_types=["toy"])
    register_layout(NAME, f"{PACKAGE}.layout")


def unregister() -> None:
    from sie_engine.models import unregister_family, unregister_layout

    unregister_family(NAME)
    unregister_layout(NAME)
