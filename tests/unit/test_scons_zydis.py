"""Which Zydis the build installs into dist/lib (toolchain/scons/zydis.py): a deps_prefix one before the system's,
the file itself rather than its soname symlink, its licence text from the same prefix; a note where none is found."""

from __future__ import annotations

import os

from SCons.Environment import Environment

from toolchain.scons import zydis


def _prefix(root):
    """A `dpkg -x libzydis4.0_*.deb DIR` layout: DIR/usr/lib/<multiarch>/libZydis.so.4.0 -> libZydis.so.4.0.0.0."""
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libZydis.so.4.0.0.0").write_bytes(b"\x7fELF zydis of the prefix")
    os.symlink("libZydis.so.4.0.0.0", lib / zydis.SONAME)
    doc = root / "usr" / "share" / "doc" / "libzydis4.0"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("License: MIT\n")
    return lib, doc / "copyright"


def test_deps_prefix_first_the_file_itself_and_its_licence(tmp_path):
    lib, copyright = _prefix(tmp_path / "deps")
    env = Environment(tools=[], CC="gcc", LIBPATH=[str(lib)])
    assert zydis.find_zydis(env) == (str(lib / "libZydis.so.4.0.0.0"), str(copyright))
    nodes = zydis.install_zydis(env, env.Dir(str(tmp_path / "dist" / "lib")))
    installed = {os.path.basename(n.abspath): n.sources[0].abspath for n in nodes}
    assert installed == {zydis.SONAME: str(lib / "libZydis.so.4.0.0.0"), zydis.LICENCE: str(copyright)}


def test_none_found_is_a_note_not_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(zydis, "_system_libdirs", lambda env: [str(tmp_path)])  # a machine without libzydis4.0
    env = Environment(tools=[], CC="gcc", LIBPATH=[str(tmp_path / "empty")])
    assert zydis.find_zydis(env) is None
    assert zydis.install_zydis(env, env.Dir(str(tmp_path / "dist" / "lib"))) == []
    out = capsys.readouterr().out
    assert "scons: note: Zydis 4 (libZydis.so.4.0) not found" in out and "apt-get install libzydis4.0" in out
