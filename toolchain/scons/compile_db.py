"""compile_commands.json of a variant (C, C++ and `.cu`), for clangd, clang-tidy and other linters.

SCons's own compilation_db tool records the compile commands (its emitters); its builder is AlwaysBuild,
which would make every null build do work and `scons -q` answer "out of date". Here the database is a
Command whose only source is a Value holding the JSON text: it is rewritten exactly when a command changes.
"""

from __future__ import annotations

import json

from toolchain.atomic import write_text


def _entries_text(env) -> str:
    import SCons.Tool.compilation_db as compdb

    directory = env.Dir("#").abspath
    overrides = {"TEMPFILE": compdb.CompDBTEMPFILE}
    entries = []
    for target, source, db_env, action in getattr(compdb, "__COMPILATION_DB_ENTRIES"):
        command = action.strfunction(target, source, db_env, None, overrides)
        src = source if source.is_derived() else source.srcnode()
        entries.append({"command": command, "directory": directory, "file": src.abspath,
                        "output": target.abspath})
    entries.sort(key=lambda e: e["output"])
    return json.dumps(entries, sort_keys=True, indent=4) + "\n"


def _write(target, source, env):
    write_text(target[0].abspath, source[0].read())  # atomic: an editor never reads half a database
    return 0


def AotiCompileCommands(env, target):
    """Call after every target of the variant is declared."""
    import SCons.Action

    return env.Command(target, env.Value(_entries_text(env)),
                       SCons.Action.Action(_write, "aoti-compile-db: $TARGET"))


def install(env) -> None:
    env.Tool("compilation_db")  # its emitters collect the entries
    env.AddMethod(AotiCompileCommands)
    if env.get("AOTI_CUDA"):
        from toolchain.scons.nvcc import add_to_compilation_db

        add_to_compilation_db(env)
