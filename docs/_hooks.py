"""MkDocs hooks: the site shows repository files that live outside docs/.

The notebooks (`notebooks/*.ipynb`, rendered by mkdocs-jupyter, every one
of them listed under Notebooks) and the benchmark notes
(`benchmarks/README.md`) stay where the repository keeps them; this hook
adds them to the site. A page's link to such a file, or to
the README, written relative to the page as on GitHub (`../README.md`),
is pointed at its page in the site, so the same Markdown reads right in
both places and `mkdocs build --strict` still checks every link.
"""

import glob
import os
import posixpath
import re

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


def on_config(config):
    """The Notebooks section lists every notebook (a new one is never left out)."""
    for item in config["nav"]:
        if isinstance(item, dict) and "Notebooks" in item:
            item["Notebooks"] = list(NOTEBOOKS)
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
