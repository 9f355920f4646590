"""Sphinx extension: keep nbdev's `#|` cell directives out of the book.

MyST-NB renders a code cell's source as written, so nbdev's directive lines (`#| export`,
`#| default_exp relations`, ...) would show up in every chapter. Sphinx's `source-read` event
hands us a notebook's JSON text before MyST-NB parses it: we drop the directive lines from its
code cells, and drop a code cell whose source held nothing but directives.

Hiding a cell (or its input) is the job of MyST-NB's cell tags, `remove-cell` / `remove-input`,
which `nbdev_clean` keeps when `settings.ini` has `allowed_cell_metadata_keys = tags`.
"""
import json
import re
from pathlib import Path

__version__ = "0.1.0"

# nbdev's own directive pattern (nbdev.process._dir_pre): optional blanks, `#`, optional blanks, `|`.
DIRECTIVE = re.compile(r"^\s*#\s*\|")


def _lines(source) -> list:
    "A cell's source (a string or a list of strings, as nbformat allows) as a list of lines."
    return "".join(source).splitlines(keepends=True)


def strip_directives(text: str) -> str:
    "Notebook JSON `text` with `#|` lines removed from code cells, and directive-only cells removed."
    nb = json.loads(text)
    cells = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            lines = _lines(cell.get("source", ""))
            kept = [line for line in lines if not DIRECTIVE.match(line)]
            if len(kept) < len(lines):  # this cell had directives
                if not "".join(kept).strip() and not cell.get("outputs"):
                    continue  # directives only: nothing left to show
                while kept and not kept[0].strip():  # no blank first line where a directive stood
                    kept.pop(0)
                cell["source"] = "".join(kept)
        cells.append(cell)
    nb["cells"] = cells
    return json.dumps(nb, ensure_ascii=False)


def _on_source_read(app, docname: str, source: list) -> None:
    "Sphinx `source-read` handler: rewrite `.ipynb` documents in place (`source[0]`)."
    if Path(str(app.env.doc2path(docname))).suffix == ".ipynb":
        source[0] = strip_directives(source[0])


def setup(app):
    app.connect("source-read", _on_source_read)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
