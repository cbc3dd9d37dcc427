"""MkDocs hooks: repository files outside docs/, maths, executed notebooks.

The notebooks (`notebooks/*.ipynb`, rendered by mkdocs-jupyter, every one
of them listed under Notebooks) and the benchmark notes
(`benchmarks/README.md`) stay where the repository keeps them; this hook
adds them to the site. A page's link to such a file, or to
the README, written relative to the page as on GitHub (`../README.md`),
is pointed at its page in the site, so the same Markdown reads right in
both places and `mkdocs build --strict` still checks every link.

The site is built and read offline: MathJax 2.7 comes from the
jupyter-server-mathjax package (docs extra) and is copied into the site;
pages with maths load it (arithmatex's `\\(...\\)` and `\\[...\\]` on
Markdown pages, `$...$` in notebooks). mkdocs-jupyter executes the
notebooks while building, in the quiet kernel of `_notebook_kernel.py`. The
build fails on a script that would not load offline.
"""

import atexit
import glob
import importlib.util
import json
import os
import posixpath
import re
import shutil
import tempfile

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Repository path -> its page in the site (a path under docs/).
SITE_PAGES = {
    "README.md": "index.md",
    "benchmarks/README.md": "benchmarks.md",
    **{
        f"notebooks/{os.path.basename(p)}": f"notebooks/{os.path.basename(p)}"
        for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))
    },
}
# Markdown links and images: ](target) or ](target#anchor).
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


NOTEBOOKS = sorted(page for page in SITE_PAGES.values() if page.endswith(".ipynb"))


# Where MathJax lies in the site, and the settings every page gives it: the
# combined configuration shipped with jupyter-server-mathjax, and its fonts
# (STIX-Web, the only web fonts it ships).
MATHJAX_DIR = "assets/mathjax"
MATHJAX = {
    "config": ["TeX-AMS-MML_HTMLorMML-full.js"],
    "HTML-CSS": {
        "availableFonts": [],
        "preferredFont": None,
        "webFont": "STIX-Web",
        "imageFont": None,
    },
    "messageStyle": "none",
}
# Markdown pages: only what arithmatex marked (generic mode) is maths. A
# notebook page configures its own delimiters (nbconvert's block).
ARITHMATEX = {
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": True,
        "processEnvironments": True,
        "ignoreClass": ".*|",
        "processClass": "arithmatex",
    }
}
# nbconvert's MathJax script, empty as mkdocs-jupyter leaves it.
EMPTY_SCRIPT = re.compile(r'<script src="">\s*</script>')
SCRIPT_SRC = re.compile(r'<script[^>]*\ssrc="([^"]*)"')


def _mathjax_source():
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise PluginError(
            "The site serves MathJax from the jupyter-server-mathjax package, "
            'which is not installed: pip install -e ".[docs]"'
        )
    return os.path.join(spec.submodule_search_locations[0], "static")


def _notebook_kernel():
    path = os.path.join(os.path.dirname(__file__), "_notebook_kernel.py")
    spec = importlib.util.spec_from_file_location("_notebook_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_KERNEL_DIRECTORY = []  # one per build process (`mkdocs serve` rebuilds)


def on_config(config):
    """Lists every notebook under Notebooks; quiets the kernels that run them."""
    for item in config["nav"]:
        if isinstance(item, dict) and "Notebooks" in item:
            item["Notebooks"] = list(NOTEBOOKS)
    _mathjax_source()  # fail before any notebook runs
    if not _KERNEL_DIRECTORY:
        directory = tempfile.mkdtemp(prefix="keras-posenc-docs-ipython-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        _KERNEL_DIRECTORY.append(directory)
        # The kernels mkdocs-jupyter starts inherit this process's environment.
        os.environ.update(_notebook_kernel().environment(directory))
    return config


@event_priority(100)  # before mkdocs-jupyter looks for notebooks
def on_files(files, config):
    for source, page in SITE_PAGES.items():
        if page == "index.md":
            continue
        if source == page:  # same path under the root as under docs/
            files.append(
                File(
                    source,
                    src_dir=ROOT,
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
        else:
            with open(os.path.join(ROOT, *source.split("/")), encoding="utf-8") as f:
                files.append(File.generated(config, page, content=f.read()))
    return files


def on_page_markdown(markdown, page, config, files):
    here = posixpath.dirname("docs/" + page.file.src_uri)
    if page.file.src_uri in SITE_PAGES.values() and page.file.abs_src_path:
        source = os.path.relpath(page.file.abs_src_path, ROOT).replace(os.sep, "/")
        if not source.startswith("docs/"):
            here = posixpath.dirname(source)

    def point(match):
        target, anchor = match.group(1), match.group(2) or ""
        if "://" in target:
            return match.group(0)
        in_repository = posixpath.normpath(posixpath.join(here, target))
        site = SITE_PAGES.get(in_repository)
        if site is None:
            return match.group(0)
        page_dir = posixpath.dirname(page.file.src_uri)
        return f"]({posixpath.relpath(site, page_dir or '.')}{anchor})"

    return LINK.sub(point, markdown)


def on_post_page(output, page, config):
    """Loads MathJax, from the site, on the pages that hold maths."""
    notebook = page.file.src_uri.endswith(".ipynb")
    output = EMPTY_SCRIPT.sub("", output)
    if not notebook and 'class="arithmatex"' not in output:
        return output
    settings = MATHJAX if notebook else {**MATHJAX, **ARITHMATEX}
    url = posixpath.relpath(f"{MATHJAX_DIR}/MathJax.js", posixpath.dirname(page.url))
    scripts = (
        f"<script>window.MathJax = {json.dumps(settings)};</script>\n"
        f'<script src="{url}"></script>\n'
    )
    return output.replace("</body>", scripts + "</body>", 1)


def on_post_build(config):
    """Copies MathJax into the site; fails on a script that cannot load offline."""
    site = config["site_dir"]
    target = os.path.join(site, *MATHJAX_DIR.split("/"))
    shutil.copytree(_mathjax_source(), target, dirs_exist_ok=True)
    missing = []
    for page in glob.glob(os.path.join(site, "**", "*.html"), recursive=True):
        with open(page, encoding="utf-8") as f:
            sources = SCRIPT_SRC.findall(f.read())
        for source in sources:
            path = source.split("?")[0]
            # Absolute paths (the 404 page's) start at the site's root.
            base = site if path.startswith("/") else os.path.dirname(page)
            local = os.path.join(base, path.lstrip("/"))
            if "://" in source or not source or not os.path.isfile(local):
                missing.append(f"{os.path.relpath(page, site)}: {source!r}")
    if missing:
        raise PluginError("Scripts that would not load offline: " + ", ".join(missing))
