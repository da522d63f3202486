"""The TODO blocks of a course exercise and its solution, and the mutations made from
them: the solution with one TODO undone (its block replaced by the exercise's)."""
import re

_MARKERS = {".c": r"/\* TODO {k} ", ".py": r"# TODO {k} "}


def blocks(text, suffix):
    """{k: block text} for every `TODO k ... END TODO k` block (whole lines)."""
    out = {}
    for k in range(1, 10):
        pattern = re.compile(r"^[ \t]*" + _MARKERS[suffix].format(k=k) + r".*?END TODO " + str(k) + r"\b.*?\n",
                             re.S | re.M)
        found = pattern.findall(text)
        if len(found) > 1:
            raise ValueError(f"TODO {k} appears {len(found)} times")
        if found:
            out[k] = found[0]
    return out


def splice(solution, exercise, suffix, todos):
    """The solution with the exercise's blocks for `todos`."""
    theirs, out = blocks(exercise, suffix), solution
    for k in todos:
        out = out.replace(blocks(out, suffix)[k], theirs[k])
    return out


def body(text, suffix):
    """The text after the leading comment or docstring (which differs on purpose)."""
    start = text.index("#define _POSIX_C_SOURCE" if suffix == ".c" else "\nimport ")
    return text[start:]
