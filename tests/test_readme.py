"""Every `python` code block of the README and of the docs pages runs as written.

A reader copies a block into a fresh interpreter: each block is executed
alone, on this pass's backend, in a new namespace (so it must hold its own
imports), in a temporary directory. Blocks that only show a signature are
marked `text`, not `python`. The command lines of its `bash` blocks use
only flags that the command line has.
"""

import configparser
import glob
import os
import re
import shlex

import pytest
from _helpers import BACKEND, LEGACY

import keras_posenc
from keras_posenc import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
# The documentation site's pages (docs/*.md), held to the README's rule.
DOCS_PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
# ```lang ... ``` at the start of a line, lang captured.
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language, page=README):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    return [
        (text[: match.start()].count("\n") + 1, match.group(2))
        for match in FENCE.finditer(text)
        if match.group(1) == language
    ]


PYTHON = blocks("python")
DOCS_PYTHON = [
    (os.path.relpath(page, ROOT), line, source)
    for page in DOCS_PAGES
    for line, source in blocks("python", page)
]


def test_readme_first_screen_shows_code():
    # The first code block starts within the first 15 lines, and it is Python.
    with open(README, encoding="utf-8") as f:
        head = f.read().splitlines()[:15]
    assert "```python" in head


def _run_block(where, source, tmp_path, monkeypatch):
    # exec in a fresh namespace: a missing import is a NameError here, a
    # signature written as Python a SyntaxError. A block for one backend
    # says so on its first line (`# KERAS_BACKEND=jax`) and runs on that pass.
    wanted = re.match(r"# KERAS_BACKEND=(\w+)", source)
    if wanted and wanted.group(1) != BACKEND:
        pytest.skip(f"a {wanted.group(1)} example")
    monkeypatch.chdir(tmp_path)
    exec(compile(source, where, "exec"), {"__name__": "__readme__"})


@pytest.mark.skipif(LEGACY, reason="the README's examples use Keras 3")
@pytest.mark.parametrize(
    "line, source", PYTHON, ids=[f"line-{line}" for line, _ in PYTHON]
)
def test_readme_python_block_runs_as_written(line, source, tmp_path, monkeypatch):
    _run_block(f"README.md, block at line {line}", source, tmp_path, monkeypatch)


@pytest.mark.skipif(LEGACY, reason="the docs' examples use Keras 3")
@pytest.mark.parametrize(
    "page, line, source",
    DOCS_PYTHON,
    ids=[f"{page}-line-{line}" for page, line, _ in DOCS_PYTHON],
)
def test_docs_page_python_block_runs_as_written(
    page, line, source, tmp_path, monkeypatch
):
    # The site's pages are read the same way: a block copied from a page
    # runs alone (a FLUX block once used a `q` defined nowhere).
    _run_block(f"{page}, block at line {line}", source, tmp_path, monkeypatch)


def test_docs_pages_have_python_blocks_to_run():
    # The collection above found the pages: an empty glob would run nothing.
    assert len(DOCS_PAGES) >= 10 and len(DOCS_PYTHON) >= 10, DOCS_PAGES


def _command_lines():
    """`(line, subcommand, [flags])` for each `python -m keras_posenc` line."""
    found = []
    for line, source in blocks("bash"):
        for command in source.replace("\\\n", " ").splitlines():
            if "python -m keras_posenc " not in command:
                continue
            words = shlex.split(command.split("python -m keras_posenc ", 1)[1])
            flags = [w.split("=")[0] for w in words if w.startswith("--")]
            found.append((line, words[0], flags))
    return found


def test_readme_command_lines_use_existing_flags():
    # Every flag the README shows is one the command (or the program) takes.
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    top = {o for a in parser._actions for o in a.option_strings}
    commands = _command_lines()
    assert {name for _, name, _ in commands} >= {"demo", "export", "plot"}
    for line, name, flags in commands:
        known = top
        if name in sub.choices:
            known = known | {
                o for a in sub.choices[name]._actions for o in a.option_strings
            }
        unknown = [f for f in flags if f not in known]
        assert not unknown, f"README line {line}: {name} has no {unknown}"


def test_readme_quick_test_command_selects_existing_tests_and_ci_runs_all(
    pytestconfig,
):
    # Quickstart command 2 is a quick subset (paths and a marker
    # expression): its paths exist and its markers are declared; CI's
    # first step is the whole suite, not the README's command.
    commands = [
        c.split("python -m pytest", 1)[1]
        for _, source in blocks("bash")
        for c in source.replace("\\\n", " ").splitlines()
        if "python -m pytest" in c
    ]
    quick = [shlex.split(c) for c in commands if c.strip()]
    assert len(quick) == 1, commands
    (words,) = quick
    assert words[0] == "-m", words
    declared = {m.split(":")[0] for m in pytestconfig.getini("markers")}
    assert set(words[1].split()) - {"and", "or", "not"} <= declared, words[1]
    # Paths, or test ids (`file::test`) of a few tests of a family.
    paths = [w.split("::")[0] for w in words[2:]]
    assert paths and all(os.path.exists(os.path.join(ROOT, p)) for p in paths), paths
    # Every family is tried by the quick command, not only the two layers.
    families = {"test_timestep", "test_grid", "test_rope_axes", "test_alibi"}
    assert families <= {os.path.basename(p)[:-3] for p in paths}, paths
    for test_id in (w for w in words[2:] if "::" in w):
        path, name = test_id.split("::")
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            assert f"\ndef {name}(" in f.read(), test_id
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert re.search(
        r'^python -m pip install -q -e "\.\[test\]" && python -m pytest$', ci, re.M
    )


def _requirements():
    """setup.cfg's requirements without TensorFlow, and its backend extras."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    required = config["options"]["install_requires"].split()
    extras = config["options.extras_require"]
    without = [r for r in required if not r.startswith("tensorflow")]
    return without, {name: extras[name].split() for name in ("jax", "torch")}


def test_readme_install_without_tensorflow_matches_setup_cfg():
    # The README's JAX-only command (which CI runs in a venv holding nothing
    # else) and its torch-only requirements are setup.cfg's requirements
    # less TensorFlow, plus that backend's extra; the package itself goes in
    # after them, with --no-deps (before them, pip reports TensorFlow missing).
    without, extras = _requirements()
    commands = [c for _, source in blocks("bash") for c in source.splitlines()]
    jax = [c for c in commands if c.startswith('pip install "keras')]
    assert [shlex.split(c)[2:] for c in jax] == [without + extras["jax"]]
    assert commands[commands.index(jax[0]) + 1] == "pip install --no-deps ."
    with open(README, encoding="utf-8") as f:
        text = " ".join(f.read().split())
    assert (
        " ".join(
            f'"{r}"' if "[" in r or ">" in r else r for r in without + extras["torch"]
        )
        in text
    )


def test_changelog_newest_release_is_this_version():
    # The version that --version and the wheel report is the CHANGELOG's
    # newest release (dated), below the changes not yet released.
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        # `## Unreleased` (changes not released yet) may come first.
        newest = next(
            line for line in f if line.startswith("## ") and line != "## Unreleased\n"
        )
    assert re.fullmatch(
        rf"## {re.escape(keras_posenc.__version__)} \(\d{{4}}-\d\d-\d\d\)\n", newest
    ), newest
