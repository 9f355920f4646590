"""The rendered book in a real browser: every page opened in headless Chromium after MathJax ran.

A page fails on what a reader would see go wrong:

* a Python traceback or an error output (MyST-NB's `output traceback` / `output stderr` blocks,
  nbconvert's `ename` markup, docutils' `system-message` boxes);
* math that MathJax did not typeset: a `.math` element with no `mjx-container`, a leftover
  `$…$`, `$$`, `\\(…\\)`, `\\[…\\]` or `\\begin{…}` in the text outside code, a MathJax error,
  or TeX that MathJax printed as text (`(scalar\\_triple)`, an undefined macro);
* an image that does not load: a local `src` with no file in the build, a file that is not a
  PNG/JPEG/GIF/WebP/SVG, a remote `src` (the book is read offline), or `naturalWidth == 0` in
  the browser;
* a display equation that runs past the text column instead of scrolling (book/_static/relbook.css).

The checks are plain functions on HTML strings, unit-tested at the bottom of this file without a
browser: those tests always run. The browser test needs Chromium (`apt-get install chromium`) and
is skipped without it. It builds the book (`jupyter-book build -W`, as `make book`, into a
temporary folder, leaving `_build/html` alone) unless `RELBOOK_BOOK_HTML` names a built book
(e.g. `RELBOOK_BOOK_HTML=_build/html` after `make book`), and saves screenshots of the landing
page, the claims page (when the book has one) and chapter 7's long equations to
`_build/screenshots/` (or `$RELBOOK_SCREENSHOTS`).
"""
import base64
import binascii
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))

WINDOW = "1280,2400"           # a laptop-wide window; tall enough to show a page's first screens
TIME_BUDGET_MS = 10_000        # virtual time for MathJax to typeset (it takes well under a second)
SCREENSHOTS = {                # file name -> toc entry; a missing page is left out
    "index": "nbs/index",
    "claims": "nbs/claims",
    "dual_attention": "nbs/12_dual_attention",  # chapter 7: the book's widest display equations
}
REPORT_ID = "relbook-browser-check"

# Injected before </body> of a copy of each page: once MathJax has typeset the page, it records
# what only a browser knows (loaded images, laid-out equations) as JSON in the DOM that
# `chromium --dump-dom` prints.
CHECK_SCRIPT = """<script>
(function () {
  function box(el) { var r = el.getBoundingClientRect(); return [r.left, r.right]; }
  function measure() {
    // mathjax: null on a page with no math (Sphinx then loads no MathJax), false if it failed
    var out = {mathjax: window.MathJax ? !!(MathJax.startup && MathJax.startup.document) : null,
               images: [], equations: []};
    var col = document.querySelector('article.bd-article') || document.querySelector('main')
              || document.body;
    out.column = box(col);
    document.querySelectorAll('img').forEach(function (img) {
      out.images.push({src: img.getAttribute('src'), complete: img.complete,
                       naturalWidth: img.naturalWidth});
    });
    var tex = new Map();
    try { for (var item of MathJax.startup.document.math) tex.set(item.typesetRoot, item.math); }
    catch (e) {}
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (m) {
      var style = getComputedStyle(m);
      out.equations.push({tex: (tex.get(m) || '').trim().slice(0, 80), box: box(m),
        scrollWidth: m.scrollWidth, clientWidth: m.clientWidth, overflowX: style.overflowX});
    });
    var s = document.createElement('script');
    s.type = 'application/json'; s.id = '%s'; s.textContent = JSON.stringify(out);
    document.body.appendChild(s);
  }
  function loadImages() {  // lazy images below the window would never load: load them all
    return Promise.all(Array.prototype.map.call(document.images, function (img) {
      img.loading = 'eager'; return img.decode().catch(function () {});
    }));
  }
  window.addEventListener('load', function () {
    var typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    Promise.all([typeset || Promise.resolve(), loadImages()]).then(measure, measure);
  });
})();
</script>""" % REPORT_ID

# Text a reader should never see outside code: TeX that MathJax left alone.
RAW_TEX = [
    (re.compile(r"\\\(|\\\)"), "an untypeset inline math delimiter \\( \\)"),
    (re.compile(r"\\\[|\\\]"), "an untypeset display math delimiter \\[ \\]"),
    (re.compile(r"\\(?:begin|end)\{[a-zA-Z*]+\}"), "an untypeset \\begin{...}/\\end{...}"),
    (re.compile(r"\$\$"), "an untypeset $$"),
    # pandoc's rule for inline $...$: no blank after the opening $ or before the closing $, and no
    # digit right after the closing one, so prose such as "costs $5 and $10" is not math
    (re.compile(r"(?<![\\$\w])\$(?=[^\s$])[^$\n]{1,200}?(?<=[^\s\\$])\$(?![\d$])"),
     "an untypeset $...$"),
]
LITERAL_TEX = re.compile(r"\\[A-Za-z_{}$%&#]")
NOT_READER_TEXT = ["head", "script", "style", "noscript", "template", "pre", "code", "kbd", "samp",
                   "textarea", "mjx-container", "svg"]
ERROR_CLASSES = {"traceback", "stderr", "error", "ename", "evalue"}
IMAGE_MAGIC = [(b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF87a", "gif"),
               (b"GIF89a", "gif")]


# --- the checks: plain functions on a page's HTML --------------------------------------------

def _soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def _short(text: str, n: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def check_errors(soup: BeautifulSoup) -> list:
    "Tracebacks and error outputs on the page."
    problems = []
    body = soup.body or soup
    if "Traceback (most recent call last)" in body.get_text():
        problems.append("a Python traceback ('Traceback (most recent call last)') is on the page")
    for el in body.find_all(True):
        classes = set(el.get("class") or [])
        mime = el.get("data-mime-type") or ""
        if (classes & ERROR_CLASSES and classes & {"output", "cell_output", "jp-OutputArea-output",
                                                   "output_area"}) or classes & {"ename", "evalue"} \
                or "stderr" in mime or "error" in mime:
            problems.append(f"an error output <{el.name} class=\"{' '.join(el.get('class') or [])}\">: "
                            f"{_short(el.get_text())!r}")
        elif "system-message" in classes:
            problems.append(f"a docutils error box: {_short(el.get_text())!r}")
    return problems


def check_math(soup: BeautifulSoup) -> list:
    "Math that MathJax did not typeset, or typeset as an error."
    problems = []
    body = soup.body or soup
    for err in body.find_all("mjx-merror"):
        problems.append(f"MathJax error: {err.get('data-mjx-error') or _short(err.get_text())!r}")
    for el in body.select(".math"):
        if el.name in ("span", "div") and el.find("mjx-container") is None:
            problems.append(f"math not typeset by MathJax: {_short(el.get_text())!r}")
    # MathJax prints a TeX command it cannot read (an undefined macro, `\_` in text mode without
    # textmacros) as text: its MathML (kept for screen readers) then holds a backslash
    for el in body.select("mjx-assistive-mml mtext"):
        if LITERAL_TEX.search(el.get_text()):
            problems.append(f"TeX shown literally in typeset math: {_short(el.get_text())!r}")
    text_soup = _soup(str(body))  # a copy: the reader's text, without code and typeset math
    for el in text_soup.find_all(NOT_READER_TEXT):
        el.decompose()
    for el in text_soup.select(".highlight, .math"):  # .math: reported above, once
        el.decompose()
    text = text_soup.get_text()
    for pattern, what in RAW_TEX:
        for m in pattern.finditer(text):
            context = text[max(0, m.start() - 30): m.end() + 30]
            problems.append(f"{what} in the text: {_short(context)!r}")
    return problems


def image_kind(data: bytes):
    "The image format of `data` from its first bytes ('png', 'jpeg', 'gif', 'webp', 'svg'), or None."
    for magic, kind in IMAGE_MAGIC:
        if data.startswith(magic):
            if kind == "png" and (len(data) < 24 or 0 in struct.unpack(">II", data[16:24])):
                return None  # no IHDR, or a 0-pixel-wide/high image
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    head = data[:4096].decode("utf-8", "ignore").lstrip("\ufeff \t\r\n")
    if head.startswith(("<?xml", "<svg", "<!--", "<!DOCTYPE svg")) and "<svg" in head:
        return "svg"
    return None


def _image_bytes(src: str, page: Path, root: Path):
    "(bytes, None) for an image `src` on `page` of the book built at `root`, or (None, problem)."
    if src.startswith("data:"):
        header, _, payload = src.partition(",")
        try:
            data = base64.b64decode(payload) if header.endswith(";base64") else unquote(payload).encode()
        except (binascii.Error, ValueError):
            return None, "a data: image that does not decode"
        return data, None
    parts = urlsplit(src)
    if parts.scheme or parts.netloc:
        return None, "a remote image (the book is read offline)"
    path = (page.parent / unquote(parts.path)).resolve()
    if not path.is_relative_to(root.resolve()):
        return None, "an image outside the built book"
    if not path.is_file():
        return None, "an image file missing from the build"
    return path.read_bytes(), None


def check_images(soup: BeautifulSoup, page: Path, root: Path) -> list:
    "Every <img> on `page` (a file of the book built at `root`) resolves to a decodable image."
    problems = []
    for img in (soup.body or soup).find_all("img"):
        src = (img.get("src") or "").strip()
        if not src:
            problems.append("an <img> with no src")
            continue
        data, problem = _image_bytes(src, page, root)
        if problem is None and image_kind(data) is None:
            problem = "an image file that is not a PNG/JPEG/GIF/WebP/SVG image"
        if problem:
            problems.append(f"{problem}: {_short(src, 120)}")
    return problems


def browser_report(soup: BeautifulSoup):
    "The measurements CHECK_SCRIPT left in the dumped DOM, or None."
    el = soup.find("script", id=REPORT_ID)
    return json.loads(el.string) if el is not None and el.string else None


def check_report(report) -> list:
    "What the browser measured: images that did not load, equations that run past the column."
    if report is None:
        return ["the in-page check did not run (MathJax or the page's load event never finished?)"]
    problems = ["MathJax did not load"] if report.get("mathjax") is False else []
    for img in report.get("images", []):
        if not img.get("naturalWidth"):
            problems.append(f"an image that did not load in the browser: {_short(img.get('src') or '', 120)}")
    left, right = report.get("column", [0, 0])
    for eq in report.get("equations", []):
        runs_past = eq["box"][1] > right + 1 or eq["box"][0] < left - 1
        clipped = eq["scrollWidth"] > eq["clientWidth"] + 1 and eq["overflowX"] not in ("auto", "scroll")
        if runs_past or clipped:
            problems.append(f"a display equation wider than the column that does not scroll: {eq['tex']!r}")
    return problems


def check_page(html: str, page: Path, root: Path, browser: bool = True) -> list:
    "Every problem on one rendered page; `browser=False` skips the checks that need CHECK_SCRIPT."
    soup = _soup(html)
    problems = check_errors(soup) + check_math(soup) + check_images(soup, page, root)
    return problems + (check_report(browser_report(soup)) if browser else [])


# --- the book and the browser -----------------------------------------------------------------

def _toc_files(node) -> list:
    files = [node["file"]] if isinstance(node, dict) and "file" in node else []
    for key in ("parts", "chapters", "sections"):
        for child in (node.get(key) or []) if isinstance(node, dict) else []:
            files += _toc_files(child)
    return files


def toc_pages(html_root: Path) -> list:
    "The built page of every `_toc.yml` entry (root first), whether or not it was built."
    return [html_root / f"{entry}.html" for entry in [TOC["root"]] + _toc_files(TOC)]


def find_chromium():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def chromium(browser: str, url: str, *args: str, timeout: int = 120) -> str:
    "Run headless Chromium on `url` with its own throw-away profile; its stdout."
    with tempfile.TemporaryDirectory(prefix="relbook-chromium-") as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-extensions", f"--user-data-dir={profile}", f"--window-size={WINDOW}",
               f"--virtual-time-budget={TIME_BUDGET_MS}", *args, url]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def dump_checked_dom(browser: str, page: Path) -> str:
    "The DOM of `page` after MathJax ran, with CHECK_SCRIPT's report in it."
    html = page.read_text(encoding="utf-8")
    probe = page.with_name(f".relbook-check-{page.name}")  # beside it: relative links still work
    end = html.rfind("</body>")
    probe.write_text(html[:end] + CHECK_SCRIPT + "\n" + html[end:], encoding="utf-8")
    try:
        return chromium(browser, probe.as_uri(), "--dump-dom")
    finally:
        probe.unlink()


def screenshot(browser: str, page: Path, png: Path) -> None:
    png.parent.mkdir(parents=True, exist_ok=True)
    chromium(browser, page.as_uri(), f"--screenshot={png}")
    assert image_kind(png.read_bytes()) == "png", f"no screenshot written to {png}"


def build_book(out: Path) -> Path:
    "Build the book as `make book` does (-W: a warning fails), into `out`; the html folder."
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb if jb.exists() else "jupyter-book"), "build", str(ROOT), "--builder", "html",
           "-W", "--keep-going", "--path-output", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        log = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # no colour codes
        problems = [line for line in log.splitlines() if re.search(r"WARNING|ERROR|Error", line)]
        pytest.fail(f"the book does not build ({' '.join(cmd)}):\n" + "\n".join(problems[:40]
                    or log.splitlines()[-40:]), pytrace=False)
    return out / "_build" / "html"


@pytest.fixture(scope="module")
def browser():
    found = find_chromium()
    if found is None:
        pytest.skip("headless Chromium not found: install it (`apt-get install chromium`) or set "
                    "CHROMIUM=/path/to/chrome to run the browser test")
    return found


@pytest.fixture(scope="module")
def book_html(browser, tmp_path_factory):
    given = os.environ.get("RELBOOK_BOOK_HTML")
    if given:
        html = Path(given) if Path(given).is_absolute() else ROOT / given
        assert (html / "index.html").is_file(), f"RELBOOK_BOOK_HTML={given}: no index.html there"
        return html
    return build_book(tmp_path_factory.mktemp("book"))


def test_every_page_in_the_browser(browser, book_html):
    pages = toc_pages(book_html)
    missing = [str(p.relative_to(book_html)) for p in pages if not p.is_file()]
    assert not missing, f"pages listed in _toc.yml but not built: {missing}"
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores on CI
        doms = list(pool.map(lambda p: dump_checked_dom(browser, p), pages))
    # A page whose in-page check left no report is loaded once more, alone: on two loaded cores Chromium's virtual-time
    # budget can run out before the load event (seen once on chapter 7 in a fresh-clone run). The second load must
    # report, and its report is checked like any other; a page that never finishes loading still fails.
    doms = [dump_checked_dom(browser, p) if browser_report(_soup(dom)) is None else dom for p, dom in zip(pages, doms)]
    failures = {str(p.relative_to(book_html)): problems for p, dom in zip(pages, doms)
                if (problems := check_page(dom, p, book_html))}
    print(f"\nchecked {len(pages)} pages in Chromium in {time.perf_counter() - start:.1f} s")
    assert not failures, "pages that fail in the browser:\n" + "\n".join(
        f"  {page}:\n" + "\n".join(f"    - {p}" for p in problems) for page, problems in failures.items())


def test_screenshots(browser, book_html):
    out = Path(os.environ.get("RELBOOK_SCREENSHOTS") or ROOT / "_build" / "screenshots")
    taken = []
    for name, entry in SCREENSHOTS.items():
        page = book_html / f"{entry}.html"
        if page.is_file():  # the claims page only once the book has one
            screenshot(browser, page, out / f"{name}.png")
            taken.append(name)
    print(f"\nscreenshots in {out}: {', '.join(taken)}")
    assert "index" in taken


# --- the book's configuration for the reader (no browser) -------------------------------------

def test_book_css_is_wired():
    "book/_static/relbook.css exists and _config.yml serves it on every page."
    config = CONFIG["sphinx"]["config"]
    static = [ROOT / d for d in config["html_static_path"]]
    for css in config["html_css_files"]:
        assert any((d / css).is_file() for d in static), f"{css} is not in {static}"
    assert "relbook.css" in config["html_css_files"]


def test_no_repository_buttons_without_a_repository():
    "A button to a repository needs its url; Jupyter Book's default url is its own repository."
    html, url = CONFIG.get("html", {}), CONFIG.get("repository", {}).get("url")
    if any(html.get(b) for b in ("use_repository_button", "use_issues_button", "use_edit_page_button")):
        assert url and "relbook/relbook" not in url, f"a button links to {url!r}"
    assert "repository" in CONFIG, "leave repository.url: '' or Jupyter Book links to its own repo"


# --- unit tests of the checks, on small pages (no browser) ------------------------------------

PNG = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 2, 3)
       + b"\x08\x06\x00\x00\x00" + b"\x00" * 4)
TYPESET_REPORT = {"mathjax": True, "column": [300, 1000], "images": [], "equations": []}


def _page(body: str, report=TYPESET_REPORT) -> str:
    script = (f'<script type="application/json" id="{REPORT_ID}">{json.dumps(report)}</script>'
              if report is not None else "")
    return f"<html><head><title>t</title></head><body><article>{body}</article>{script}</body></html>"


@pytest.fixture
def book(tmp_path):
    "A tiny built book: nbs/page.html beside _images/ok.png."
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "ok.png").write_bytes(PNG)
    (tmp_path / "_images" / "broken.png").write_bytes(b"<html>404</html>")
    (tmp_path / "nbs").mkdir()
    return tmp_path, tmp_path / "nbs" / "page.html"


CLEAN = ('<p>Relations <span class="math notranslate nohighlight"><mjx-container class="MathJax" '
         'jax="CHTML">x</mjx-container></span> cost $5 and $10; <code>$x$ \\(y\\)</code></p>'
         '<div class="math"><mjx-container display="true">R<mjx-assistive-mml><math><mi>R</mi>'
         '<mtext>(1)</mtext></math></mjx-assistive-mml></mjx-container></div>'
         '<pre>Traceback? no: print("$a$")</pre><img src="../_images/ok.png" alt="">'
         '<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi">'
         '<pre>loss 0.1</pre></div></div>')


def test_clean_page_passes(book):
    root, page = book
    assert check_page(_page(CLEAN), page, root) == []


@pytest.mark.parametrize("body, expected", [
    ("<p>raw $x^2$ here</p>", "untypeset $...$"),
    ("<p>raw $$x^2$$ here</p>", "untypeset $$"),
    ('<p>see <span class="math">\\(x\\)</span></p>', "math not typeset by MathJax"),
    ("<p>display \\[x\\] left</p>", "display math delimiter"),
    ("<p>\\begin{align}x\\end{align}</p>", "\\begin"),
    ('<p><span class="math"><mjx-container><mjx-merror data-mjx-error="Missing close brace">'
     '</mjx-merror></mjx-container></span></p>', "MathJax error: 'Missing close brace'"),
    ('<div class="math"><mjx-container display="true"><mjx-math>x</mjx-math><mjx-assistive-mml>'
     '<math><mi>x</mi><mtext>(scalar\\_triple)</mtext></math></mjx-assistive-mml></mjx-container>'
     '</div>', "TeX shown literally in typeset math: '(scalar\\\\_triple)'"),
])
def test_untypeset_math_fails(book, body, expected):
    root, page = book
    problems = check_page(_page(body), page, root)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("body, expected", [
    ("<pre>Traceback (most recent call last):\n  File ...\nValueError: bad</pre>", "traceback"),
    ('<div class="output traceback highlight-ipythontb notranslate"><pre>ValueError</pre></div>',
     "error output"),
    ('<div class="output stderr highlight-myst-ansi"><pre>warning</pre></div>', "error output"),
    ('<div class="output_area"><div data-mime-type="application/vnd.jupyter.stderr">w</div></div>',
     "error output"),
    ('<div class="system-message"><p>Unknown directive</p></div>', "docutils error box"),
])
def test_errors_on_the_page_fail(book, body, expected):
    root, page = book
    problems = check_page(_page(body), page, root)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("src, expected", [
    ("../_images/missing.png", "missing from the build"),
    ("../_images/broken.png", "not a PNG/JPEG/GIF/WebP/SVG"),
    ("https://example.org/fig.png", "remote image"),
    ("../../outside.png", "outside the built book"),
    ("data:image/png;base64,bm90IGFuIGltYWdl", "not a PNG"),
    ("", "no src"),
])
def test_images_that_do_not_load_fail(book, src, expected):
    root, page = book
    problems = check_page(_page(f'<img src="{src}" alt="">'), page, root)
    assert any(expected in p for p in problems), problems


def test_image_kinds():
    assert image_kind(PNG) == "png"
    assert image_kind(PNG[:16] + struct.pack(">II", 0, 3)) is None  # 0 pixels wide
    assert image_kind(b"\xff\xd8\xff\xe0JFIF") == "jpeg"
    assert image_kind(b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>') == "svg"
    assert image_kind(b"<html></html>") is None
    good = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert check_images(_soup(f'<body><img src="{good}"></body>'), Path("/b/p.html"), Path("/b")) == []


@pytest.mark.parametrize("report, expected", [
    (None, "in-page check did not run"),
    (dict(TYPESET_REPORT, mathjax=False), "MathJax did not load"),
    (dict(TYPESET_REPORT, images=[{"src": "a.png", "complete": True, "naturalWidth": 0}]),
     "did not load in the browser: a.png"),
    (dict(TYPESET_REPORT, equations=[{"tex": "RA", "box": [300, 1400], "scrollWidth": 1100,
                                      "clientWidth": 1100, "overflowX": "visible"}]), "'RA'"),
    (dict(TYPESET_REPORT, equations=[{"tex": "RA", "box": [300, 1000], "scrollWidth": 1100,
                                      "clientWidth": 700, "overflowX": "visible"}]), "does not scroll"),
])
def test_browser_report_failures(book, report, expected):
    root, page = book
    problems = check_page(_page("<p>ok</p>", report), page, root)
    assert any(expected in p for p in problems), problems


def test_scrolling_equation_passes(book):
    root, page = book
    report = dict(TYPESET_REPORT, equations=[{"tex": "RA", "box": [300, 1000], "scrollWidth": 1100,
                                              "clientWidth": 700, "overflowX": "auto"}])
    assert check_page(_page("<p>ok</p>", report), page, root) == []
    assert check_page(_page("<p>ok</p>", None), page, root, browser=False) == []
    no_math = dict(TYPESET_REPORT, mathjax=None)  # Sphinx loads no MathJax on a page with no math
    assert check_page(_page("<p>ok</p>", no_math), page, root) == []


def test_toc_pages_cover_the_toc(tmp_path):
    pages = toc_pages(tmp_path)
    assert pages[0] == tmp_path / "nbs" / "index.html"
    assert len(pages) == 1 + len(_toc_files(TOC)) and all(p.suffix == ".html" for p in pages)
