"""What the modules of a command's start-up use instead of heavier imports: their pathlib.Path constants made
when first read (pathlib imports urllib.parse and ipaddress: ~3 ms of every start on Python 3.11; verify's code
scans fork before it is imported, and the child never needs it), and importlib.util.find_spec without
importlib.util (and the contextlib it imports), and str(Path(p)) without pathlib."""

from __future__ import annotations

import os
import sys


def here(module_file: str, *parts: str) -> str:
    """str(Path(module_file).resolve().parent.joinpath(*parts)), without pathlib."""
    return os.path.join(os.path.dirname(os.path.realpath(module_file)), *parts)


def lazy_paths(module_globals: dict, **paths: str) -> None:
    """Give a module (its globals()) a PEP 562 __getattr__ under which each name in `paths` reads as
    pathlib.Path(the string), made on first access and kept. Code inside the module reads the strings."""

    def __getattr__(name: str):
        if name in paths:
            from pathlib import Path

            value = module_globals[name] = Path(paths[name])
            return value
        msg = f"module {module_globals['__name__']!r} has no attribute {name!r}"
        raise AttributeError(msg)

    module_globals["__getattr__"] = __getattr__


def read_text(path: str | os.PathLike[str]) -> str:
    """Path(path).read_text(encoding="utf-8") for a str or a Path (the spec loaders read str paths)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def find_spec(name: str):
    """importlib.util.find_spec(name) of a top-level module name (an imported module's __spec__, else the first
    of sys.meta_path's finders that finds it)."""
    if "." in name:
        raise ValueError(f"{name!r}: a top-level module name only")
    module = sys.modules.get(name)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        if spec is None:
            raise ValueError(f"{name}.__spec__ is None")
        return spec
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = None if find is None else find(name, None)
        if spec is not None:
            return spec
    return None


def path_str(path: str | os.PathLike[str]) -> str:
    """str(pathlib.Path(path)) on POSIX, without pathlib: empty and "." parts dropped, a root of exactly two
    slashes kept (POSIX leaves its meaning to the system), more made one."""
    path = os.fspath(path)
    root = "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    return root + "/".join(part for part in path.split("/") if part and part != ".") or "."
