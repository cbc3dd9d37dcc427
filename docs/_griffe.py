"""A griffe extension for the API reference: doctests shown as code blocks.

The docstrings follow the house style, where the `>>>` lines of an
example sit at the indentation of their `Example (...):` title and run as
doctests. Markdown would read them as nested quotes (and `[x for x in y]`
as a link), so each run of doctest lines, with the output lines that
follow it, is wrapped in a `pycon` fence. The docstrings themselves are
left as they are.
"""

import griffe


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


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
