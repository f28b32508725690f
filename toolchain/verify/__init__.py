"""Prove before shipping that a plugin will load in a given host on a given target.

API: ``verify_paths(paths, host=None, profile="host", strict=False) -> Report``; ``report.exit_code``.
The SCons build, the release pipeline and ``aoti-toolchain verify`` all go through it. ``host=None`` checks
standalone; the CLI's default host is this project's runtime library (``default_host``).

The checks live in toolchain.verify.core and are imported on first use of a name below: importing a
submodule (the CLI's toolchain.verify.profiles for its defaults, toolchain.verify.scans to start the code
scans) does not load the ELF reader, the resolver and the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolchain.verify.core import (
        DEFAULT_PROFILE,
        Report,
        check_elf,
        default_host,
        elf_members,
        make_context,
        proxy_ops,
        verify_buffer,
        verify_paths,
    )

__all__ = ["verify_paths", "verify_buffer", "make_context", "check_elf", "Report", "DEFAULT_PROFILE", "elf_members",
           "default_host", "proxy_ops"]


def __getattr__(name: str):
    if name in __all__:
        from toolchain.verify import core

        value = getattr(core, name)
        globals()[name] = value
        return value
    msg = f"module 'toolchain.verify' has no attribute {name!r}"
    raise AttributeError(msg)
