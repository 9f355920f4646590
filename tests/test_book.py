"""The book's wiring: table of contents, Jupyter Book config, bibliography and the `#|` filter.

Fast checks only: nothing here builds the book (`make book` does that).
"""
import configparser
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
PAGE_SUFFIXES = (".ipynb", ".md")


def _load_extension():
    "The local Sphinx extension named in `_config.yml`, imported from its path."
    (name, path), = CONFIG["sphinx"]["local_extensions"].items()
    spec = importlib.util.spec_from_file_location(name, ROOT / path / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ext = _load_extension()


def _toc_files(node) -> list:
    "Every `file:` entry under a toc node (parts, chapters and nested sections)."
    files = [node["file"]] if isinstance(node, dict) and "file" in node else []
    for key in ("parts", "chapters", "sections"):
        for child in (node.get(key) or []) if isinstance(node, dict) else []:
            files += _toc_files(child)
    return files


def _toc_entries() -> list:
    return [TOC["root"]] + _toc_files(TOC)


def _pages() -> list:
    "The book's source pages in nbs/: notebooks and markdown, skipping `_*` and hidden folders."
    return sorted(p for p in NBS.rglob("*") if p.suffix in PAGE_SUFFIXES
                  and not any(part.startswith(("_", ".")) for part in p.relative_to(NBS).parts))


def _resolve(entry: str) -> list:
    "The files a toc entry (written without suffix) can refer to."
    return [p for p in (ROOT / f"{entry}{s}" for s in PAGE_SUFFIXES) if p.exists()]


def _nb(cells: list) -> str:
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def _code(source, tags=None, outputs=None) -> dict:
    return {"cell_type": "code", "source": source, "metadata": {"tags": tags} if tags else {},
            "outputs": outputs or [], "execution_count": None}


def _code_cells(path: Path):
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            yield cell, "".join(cell["source"])


# --- table of contents ------------------------------------------------------------------------

def test_toc_format_and_parts():
    assert TOC["format"] == "jb-book" and TOC["root"] == "nbs/index"
    captions = [part["caption"] for part in TOC["parts"]]
    assert captions[0] == "Foundations" and captions[-1] == "Appendix: the lab", captions
    assert TOC["parts"][0].get("numbered") is True, "Foundations must be numbered"


@pytest.mark.parametrize("entry", _toc_entries())
def test_toc_entry_exists(entry):
    found = _resolve(entry)
    assert len(found) == 1, f"_toc.yml lists {entry!r}: expected one of {entry}.ipynb / {entry}.md, found {found}"


def test_toc_has_no_duplicates():
    entries = _toc_entries()
    assert len(entries) == len(set(entries)), f"listed twice in _toc.yml: {sorted({e for e in entries if entries.count(e) > 1})}"


def test_every_page_is_in_toc():
    listed = {e for e in _toc_entries()}
    missing = [str(p.relative_to(ROOT)) for p in _pages()
               if p.relative_to(ROOT).with_suffix("").as_posix() not in listed]
    assert not missing, f"pages in nbs/ missing from _toc.yml (only_build_toc_files drops them): {missing}"


# --- _config.yml --------------------------------------------------------------------------------

def test_config_never_executes():
    assert CONFIG["execute"]["execute_notebooks"] == "off", "the book shows the committed outputs; quote 'off' in YAML"
    assert CONFIG["execute"]["stderr_output"] == "remove"
    assert CONFIG["only_build_toc_files"] is True


def test_config_offline_math_and_directive_filter():
    assert "sphinx-mathjax-offline" in CONFIG["sphinx"]["extra_extensions"], "MathJax must be bundled, not fetched from a CDN"
    (name, path), = CONFIG["sphinx"]["local_extensions"].items()
    assert (ROOT / path / f"{name}.py").is_file(), f"local extension {name} not found under {path}"
    assert {"amsmath", "dollarmath"} <= set(CONFIG["parse"]["myst_enable_extensions"])


def test_config_excludes_non_book_folders():
    assert {".venv", "_build", "relbook", "tests", "results"} <= set(CONFIG["exclude_patterns"])


def test_cell_tags_survive_nbdev_clean():
    "remove-cell / remove-input live in cell metadata, which nbdev_clean strips unless allowed."
    cfg = configparser.ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    assert "tags" in cfg["DEFAULT"].get("allowed_cell_metadata_keys", "").split()


# --- bibliography -------------------------------------------------------------------------------

def _bib_keys() -> set:
    bibs = CONFIG["bibtex_bibfiles"]
    text = "".join((ROOT / b).read_text(encoding="utf-8") for b in bibs)
    return set(re.findall(r"^@\w+\{([^,\s]+),", text, flags=re.M))


def test_bibliography_has_the_papers():
    keys = _bib_keys()
    assert {"altabaa2023abstractors", "altabaa2024abstractors", "altabaa2024disentangling",
            "schlag2019enhancing", "clift2020logic", "vaswani2017attention"} <= keys


def test_every_citation_is_in_the_bibliography():
    keys, cited = _bib_keys(), {}
    for page in _pages():
        for group in re.findall(r"\{(?:foot)?cite(?::\w+)?\}`([^`]+)`", page.read_text(encoding="utf-8")):
            for key in group.split(","):
                cited.setdefault(key.strip(), page.name)
    unknown = {k: v for k, v in cited.items() if k not in keys}
    assert not unknown, f"cited but not in {CONFIG['bibtex_bibfiles']}: {unknown}"


# --- hidden cells -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [p for p in _pages() if p.suffix == ".ipynb"], ids=lambda p: p.name)
def test_hidden_cells_are_tagged(path):
    "nbdev's `#| hide` / `#| echo: false` hide a cell in nbdev's docs; in the book, tags do that."
    for cell, source in _code_cells(path):
        directives = [ln for ln in source.splitlines() if ext.DIRECTIVE.match(ln)]
        tags = set(cell["metadata"].get("tags", []))
        if any(re.search(r"\|\s*hide\b", d) for d in directives):
            assert "remove-cell" in tags, f"{path.name}: `#| hide` cell needs the remove-cell tag:\n{source[:200]}"
        if any(re.search(r"\|\s*echo:\s*false", d) for d in directives):
            assert tags & {"remove-cell", "remove-input"}, f"{path.name}: `#| echo: false` cell needs remove-input:\n{source[:200]}"


# --- the `#|` filter (book/_ext) ----------------------------------------------------------------

def test_strip_drops_directive_lines_and_keeps_code():
    out = json.loads(ext.strip_directives(_nb([_code("#| export\ndef f(x):\n    return x  # a comment\n")])))
    assert out["cells"][0]["source"] == "def f(x):\n    return x  # a comment\n"


def test_strip_handles_list_sources_and_spacing_variants():
    cell = _code(["#|export\n", "# | exporti\n", "  #|  hide\n", "\n", "x = 1\n", "# not a directive\n"])
    (out,) = json.loads(ext.strip_directives(_nb([cell])))["cells"]
    assert out["source"] == "x = 1\n# not a directive\n"


def test_strip_drops_directive_only_cells_and_keeps_the_rest():
    cells = [_code("#| default_exp relations"), _code("#| export\n\n"),
             _code(""),  # empty without directives: not ours to drop
             {"cell_type": "markdown", "source": "#| not code", "metadata": {}},
             _code("y = 2", tags=["remove-input"])]
    out = json.loads(ext.strip_directives(_nb(cells)))["cells"]
    assert [c["source"] for c in out] == ["", "#| not code", "y = 2"]
    assert out[2]["metadata"] == {"tags": ["remove-input"]}, "cell metadata (tags) must pass through"


def test_strip_keeps_a_directive_only_cell_that_has_outputs():
    outputs = [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
    out = json.loads(ext.strip_directives(_nb([_code("#| hide", outputs=outputs)])))["cells"]
    assert len(out) == 1 and out[0]["outputs"] == outputs


def test_strip_is_idempotent_and_leaves_clean_notebooks_alone():
    text = _nb([_code("import torch\n"), {"cell_type": "markdown", "source": "# Title", "metadata": {}}])
    once = ext.strip_directives(text)
    assert json.loads(once) == json.loads(text)
    assert ext.strip_directives(once) == once
