"""The API reference (`docs/api.md`) names every public name of the package."""

import os
import re

import keras_posenc
from keras_posenc import compat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _api_page():
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
        return f.read()


def _documented(page):
    """Names the page renders: `::: module.name` lines and `members:` items."""
    names = {line.rsplit(".", 1)[-1] for line in re.findall(r"^::: (\S+)", page, re.M)}
    return names | set(re.findall(r"^ {8}- (\w+)$", page, re.M))


def test_api_page_documents_every_public_name():
    # A public name missing from the reference is invisible on the site.
    page = _api_page()
    documented = _documented(page)
    public = set(keras_posenc.__all__) - {"__version__"}
    assert public - documented == set()
    assert set(compat.__all__) - documented == set()
    assert "::: keras_posenc.compat" in page
