"""aoti-toolchain inspect: kind, arch, DT_NEEDED, RUNPATH, entry points, shims, versions, stack, ops."""

from __future__ import annotations

import json
from pathlib import Path

from toolchain.errors import exit_code
from toolchain.inspect import inspect_path, to_text


def main(args) -> int:
    infos = []
    for p in args.files:
        infos.extend(inspect_path(Path(p)))
    if args.json:
        print(json.dumps({"schema_version": 1, "files": infos}, indent=2))
    else:
        print("".join(to_text(i) for i in infos), end="")
    return exit_code("bad_input") if any(i["kind"] == "unreadable" for i in infos) else exit_code("ok")


def register(sub) -> None:
    i = sub.add_parser("inspect", help="what a file is and needs: its model (inputs, outputs, constants, torch), the ATen ops it calls, ELF facts")
    i.add_argument("files", nargs="+", metavar="FILE", help="a .pt2 package, plugin .so, host program or shared library")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=main)
