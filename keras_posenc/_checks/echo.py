"""Values echoed in error messages, cut short: a message stays one line.

Configs come from files (a `config.json`, a `.keras` file) whose values
may be huge: a list of two million factors, a dict of a million keys, a
string of megabytes. An error names the argument and echoes its value
through `shortened`.
"""

import itertools

# What an error message shows of a long value.
_ECHO_ITEMS, _ECHO_CHARS, _ECHO_DEPTH = 8, 200, 4


def shortened(value, depth=0):
    """`value` for an error message: long lists, dicts and strings cut short.

    A list or dict past 8 entries shows its first 3 and its length, a string
    past 200 characters its start and its length, anything nested deeper
    than 4 levels its type: a message stays a line whatever the value.
    """
    if depth >= _ECHO_DEPTH and isinstance(value, (dict, list, tuple)):
        return f"<{type(value).__name__} of {len(value)}>"
    if isinstance(value, str) and len(value) > _ECHO_CHARS:
        return f"<str of {len(value)} characters: {value[:40]!r}...>"
    if isinstance(value, dict):
        items = itertools.islice(
            value.items(), _ECHO_ITEMS if len(value) <= _ECHO_ITEMS else 3
        )
        shown = {k: shortened(v, depth + 1) for k, v in items}
        if len(value) > _ECHO_ITEMS:
            shown["..."] = f"<{len(value)} keys>"
        return shown
    if isinstance(value, (list, tuple)) and len(value) > _ECHO_ITEMS:
        head = ", ".join(repr(shortened(v, depth + 1)) for v in value[:3])
        return f"<{type(value).__name__} of {len(value)} values: {head}, ...>"
    if isinstance(value, (list, tuple)):
        return type(value)(shortened(v, depth + 1) for v in value)
    return value
