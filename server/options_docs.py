"""The options tables of docs/deploy.md, generated from the declarations (server/options.py,
server/router/options.py): `python -m sie_server.options_docs --write docs/deploy.md` rewrites the
text between each `<!-- options:NAME -->` and `<!-- /options:NAME -->`; without `--write` it prints
them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .options import SERVE, markdown_table
from .router.options import ROUTER


def doc_sections() -> dict[str, str]:
    """Marker name -> generated table, for every table docs/deploy.md holds."""
    return {"serve": markdown_table(SERVE), "router": markdown_table(ROUTER)}


def write_doc(path: Path) -> bool:
    """Rewrite the generated tables between `<!-- options:NAME -->` markers; True if it changed."""
    old = path.read_text()
    new = old
    for name, table in doc_sections().items():
        start, end = f"<!-- options:{name} -->\n", f"<!-- /options:{name} -->"
        new = re.sub(rf"{re.escape(start)}.*?{re.escape(end)}", (start + table + "\n" + end).replace("\\", "\\\\"),
                     new, flags=re.S)
    if new != old:
        path.write_text(new)
    return new != old


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        for target in sys.argv[2:]:
            print(f"{target}: {'rewritten' if write_doc(Path(target)) else 'up to date'}")
    else:
        for name, table in doc_sections().items():
            print(f"<!-- options:{name} -->\n{table}\n<!-- /options:{name} -->\n")
