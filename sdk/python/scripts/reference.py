"""Writes the SDK's API reference (HTML, from the docstrings) with pdoc.

    python scripts/reference.py OUTDIR

`make python-docs` writes it to docs/python/; `go test ./sdk/python/` (make
test) writes it to a temporary directory, so a docstring pdoc cannot render
fails the tests. It fails when pdoc warns (a reference it cannot resolve,
a docstring it cannot parse) and when a public name has no entry.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import pdoc
import pdoc.render

import space_sandbox


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: reference.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    pdoc.render.configure(docformat="restructuredtext", show_source=False, search=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        pdoc.pdoc("space_sandbox", output_directory=out)
    problems = [f"pdoc: {w.message}" for w in seen]
    page = (out / "space_sandbox.html").read_text(encoding="utf-8")
    problems += [f"{name}: no entry in the reference" for name in space_sandbox.__all__ if f'id="{name}"' not in page]
    problems += unresolved_references()
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"API reference of space_sandbox {space_sandbox.__version__}: {out / 'index.html'}")
    return 0


_REF = re.compile(r":(class|meth|func|attr|mod):`~?([\w.]+)`")


def unresolved_references() -> "list[str]":
    """The cross-references of the package's docstrings that name nothing:
    pdoc renders them as plain text without a warning. A name resolves in
    the module it is written in, as an attribute of one of its classes, or
    from the package (``space_sandbox.X``)."""
    import importlib
    import inspect

    out = []
    for f in sorted(Path(space_sandbox.__file__).parent.glob("*.py")):
        mod = importlib.import_module("space_sandbox" if f.stem == "__init__" else "space_sandbox." + f.stem)
        scopes = [mod, space_sandbox] + [c for _, c in inspect.getmembers(mod, inspect.isclass)]
        for role, target in _REF.findall(f.read_text(encoding="utf-8")):
            if role == "mod":
                continue
            name = target.removeprefix("space_sandbox.")
            if not any(_resolves(scope, name) for scope in scopes):
                out.append(f"{f.name}: :{role}:`{target}` names nothing")
    return out


def _resolves(scope: object, dotted: str) -> bool:
    for part in dotted.split("."):
        if not hasattr(scope, part):
            return False
        scope = getattr(scope, part)
    return True


if __name__ == "__main__":
    sys.exit(main())
