"""A griffe extension for the API reference: doctests and Keras's sections.

The docstrings follow the house style, where the `>>>` lines of an
example sit at the indentation of their `Example (...):` title and run as
doctests. Markdown would read them as nested quotes (and `[x for x in y]`
as a link), so each run of doctest lines, with the output lines that
follow it, is wrapped in a `pycon` fence.

Keras's sections `Call arguments:`, `Input shape:` and `Output shape:` are
not Google sections: griffe reads them as admonitions, which the site
showed as folded boxes of one run-on paragraph. The call arguments become
a table like `Args:` (typed from the signature of `call`), the shapes
titled paragraphs. The docstrings themselves are left as they are.
"""

import re
import textwrap

import griffe
from griffe import (
    Docstring,
    DocstringSectionAdmonition,
    DocstringSectionText,
)

CALL_ARGUMENTS = "Call arguments"
KERAS = (CALL_ARGUMENTS, "Input shape", "Output shape")
# The first line of an argument's entry: `name: what it is`.
ENTRY = re.compile(r"\w+: ")


def fence_doctests(text):
    """`text` with every run of doctest lines wrapped in a pycon fence."""
    out, block = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if block is None and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = [f"{indent}```pycon"]
        if block is not None:
            if stripped:
                block.append(line)
                continue
            out.extend([*block, block[0].replace("```pycon", "```")])
            block = None
        out.append(line)
    if block is not None:
        out.extend([*block, block[0].replace("```pycon", "```")])
    return "\n".join(out)


def _call_arguments(section, cls, docstring):
    """The `Call arguments:` admonition as a parameters table."""
    call = cls.members.get("call", cls)
    # A summary line first: the parser reads a first line as the summary.
    _, table = Docstring(
        "The call.\n\nArgs:\n" + textwrap.indent(section.value.contents, "    "),
        parent=call,
        parser=docstring.parser,
        parser_options=docstring.parser_options,
    ).parse()
    table.title = f"{CALL_ARGUMENTS}:"
    return table


def _is_argument_list(contents):
    """Whether every unindented line of `contents` starts an `name: ...` entry."""
    entries = [line for line in contents.splitlines() if not line[:1].isspace()]
    return all(ENTRY.match(line) for line in entries)


def keras_sections(cls):
    """`cls`'s docstring sections, Keras's own rendered as sections."""
    docstring = cls.docstring
    sections = []
    for section in docstring.parse():
        title = getattr(section, "title", None)
        if isinstance(section, DocstringSectionAdmonition) and title in KERAS:
            contents = section.value.contents
            if title == CALL_ARGUMENTS and _is_argument_list(contents):
                section = _call_arguments(section, cls, docstring)
            else:  # prose: "As `compat.RotaryEmbedding`."
                section = DocstringSectionText(
                    f'<p><span class="doc-section-title">{title}:</span></p>\n\n'
                    + contents
                )
        sections.append(section)
    return sections


class Docstrings(griffe.Extension):
    """Doctests fenced; Keras's sections shown as sections."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)

    def on_class_members(self, *, cls, **kwargs):
        # Once `call` is known (its signature types the call arguments).
        text = cls.docstring.value if cls.docstring is not None else ""
        if any(f"{title}:" in text for title in KERAS):
            # `parsed` is a cached property: what the templates read.
            cls.docstring.__dict__["parsed"] = keras_sections(cls)
