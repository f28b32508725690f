"""The user's cache of parsed spec files (toolchain.parsed_cache): a hit gives what parsing gives; an entry that
is stale, corrupt, truncated, planted by another user, group- or world-writable or a symlink is never used; a
cache that cannot be written costs a parse and nothing else; the packaged loaders give the same objects from
the cache as from the TOML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain import parsed_cache
from toolchain.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting a file of another owner needs root (chown)")


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr(parsed_cache, "_writes", True)  # as the command line has it
    return home


class Loader:
    """A loader of one source file that counts its parses: the value is the file's text, split in words."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.builds = 0

    def build(self) -> tuple[str, ...]:
        self.builds += 1
        text = self.path.read_text()
        if "bad" in text:
            raise SpecError(f"{self.path}: bad", fix="no bad")
        return tuple(text.split())

    def load(self):
        return parsed_cache.load("words", (self.path,), self.build, tuple)


def _entry(cache_home: Path) -> Path:
    (entry,) = (cache_home / "aoti-toolchain" / parsed_cache.SUBDIR).glob("words-*")
    return entry


@pytest.fixture
def loader(tmp_path, cache_home) -> Loader:
    src = tmp_path / "words.txt"
    src.write_text("a b c")
    return Loader(src)


def test_a_hit_does_not_parse_and_gives_the_same_value(loader, cache_home):
    assert loader.load() == ("a", "b", "c") and loader.builds == 1
    assert loader.load() == ("a", "b", "c") and loader.builds == 1
    entry = _entry(cache_home)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert (cache_home / "aoti-toolchain" / parsed_cache.SUBDIR).stat().st_mode & 0o777 == 0o700
    assert not [p for p in entry.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_a_changed_source_is_parsed_again(loader):
    loader.load()
    loader.path.write_text("a b d")
    assert loader.load() == ("a", "b", "d") and loader.builds == 2
    assert loader.load() == ("a", "b", "d") and loader.builds == 2


def test_the_key_covers_the_path_too(tmp_path, cache_home):
    """Two copies of one file (two installations) get their own entries: values may name their source."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("x")
    b.write_text("x")
    la, lb = Loader(a), Loader(b)
    la.load(), lb.load(), la.load(), lb.load()
    assert (la.builds, lb.builds) == (1, 1)
    assert len(list((cache_home / "aoti-toolchain" / parsed_cache.SUBDIR).glob("words-*"))) == 2


@pytest.mark.parametrize("damage", ["flip a payload byte", "truncate", "empty", "wrong magic", "other key"])
def test_a_corrupt_entry_is_ignored_and_rewritten(loader, cache_home, damage):
    loader.load()
    entry = _entry(cache_home)
    data = bytearray(entry.read_bytes())
    if damage == "flip a payload byte":
        data[-1] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) - 3]
    elif damage == "empty":
        data = bytearray()
    elif damage == "wrong magic":
        data[0] ^= 0xFF
    else:
        data[len(parsed_cache.MAGIC)] ^= 0xFF
    entry.write_bytes(bytes(data))
    assert loader.load() == ("a", "b", "c") and loader.builds == 2
    assert loader.load() == ("a", "b", "c") and loader.builds == 2  # rewritten whole


def test_an_entry_of_another_shape_is_rebuilt(tmp_path, cache_home):
    """A loader whose decode refuses what an older loader stored (another arity) parses again."""
    src = tmp_path / "words.txt"
    src.write_text("a b c")
    parsed_cache.load("pairs", (src,), lambda: ("a", "b", "c"), tuple)
    calls = []

    def build():
        calls.append(1)
        return (("a", 1),)

    def decode(stored):
        return tuple((k, v) for k, v in stored)  # "a" does not unpack into two: ValueError

    assert parsed_cache.load("pairs", (src,), build, decode) == (("a", 1),) and calls == [1]
    assert parsed_cache.load("pairs", (src,), build, decode) == (("a", 1),) and calls == [1]


def test_a_group_or_world_writable_entry_is_ignored(loader, cache_home):
    loader.load()
    entry = _entry(cache_home)
    for mode in (0o620, 0o602):
        entry.chmod(mode)
        builds = loader.builds
        assert loader.load() == ("a", "b", "c") and loader.builds == builds + 1
        assert entry.stat().st_mode & 0o777 == 0o600  # replaced by a private one


def test_a_symlinked_entry_is_ignored(loader, cache_home, tmp_path):
    loader.load()
    entry = _entry(cache_home)
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)  # a valid entry, reached through a link
    assert loader.load() == ("a", "b", "c") and loader.builds == 2
    assert not entry.is_symlink()  # the link was replaced, its target left alone
    assert elsewhere.read_bytes() == entry.read_bytes()


@as_root
def test_an_entry_planted_by_another_user_is_ignored(loader, cache_home):
    loader.load()
    entry = _entry(cache_home)
    os.chown(entry, OTHER_UID, OTHER_UID)
    assert loader.load() == ("a", "b", "c") and loader.builds == 2
    assert entry.stat().st_uid == os.geteuid()


@as_root
def test_nothing_is_written_into_a_directory_of_another_user(loader, cache_home):
    d = cache_home / "aoti-toolchain" / parsed_cache.SUBDIR
    d.mkdir(parents=True, mode=0o700)
    os.chown(d, OTHER_UID, OTHER_UID)
    loader.load(), loader.load()
    assert loader.builds == 2 and not list(d.iterdir())


def test_a_program_that_imports_the_library_reads_the_cache_and_writes_nothing(tmp_path):
    """Only the command line stores entries: a server or the runtime module, importing the same loaders, parses
    (cold) or reads what the command line stored (warm), and leaves the user's home as it found it."""
    xdg = tmp_path / "xdg"
    library = _dump(str(xdg), who="library")
    assert library["tomllib"] and not xdg.exists()
    _dump(str(xdg))  # the command line stores
    stored = sorted(p.name for p in (xdg / "aoti-toolchain" / parsed_cache.SUBDIR).iterdir())
    warm = _dump(str(xdg), who="library")
    assert not warm["tomllib"] and warm["reprs"] == library["reprs"]
    assert sorted(p.name for p in (xdg / "aoti-toolchain" / parsed_cache.SUBDIR).iterdir()) == stored


@pytest.mark.parametrize("how", ["link", "shared"])
def test_nothing_is_written_below_a_linked_or_shared_aoti_toolchain_directory(loader, cache_home, tmp_path, how):
    """The aoti-toolchain directory itself follows the plugin cache's root rules: a symlink to (or a
    world-writable directory of) someone else's gets no parsed/ made inside it."""
    root = cache_home / "aoti-toolchain"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    cache_home.mkdir()
    if how == "link":
        root.symlink_to(theirs)
    else:
        root.mkdir()
        root.chmod(0o777)
    loader.load(), loader.load()
    assert loader.builds == 2
    assert not list(theirs.iterdir()) and (how == "link" or not list(root.iterdir()))


def test_nothing_is_written_into_a_shared_or_linked_directory(loader, cache_home, tmp_path):
    d = cache_home / "aoti-toolchain" / parsed_cache.SUBDIR
    d.mkdir(parents=True)
    d.chmod(0o777)
    loader.load(), loader.load()
    assert loader.builds == 2 and not list(d.iterdir())
    d.rmdir()
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    d.symlink_to(target)
    loader.load(), loader.load()
    assert loader.builds == 4 and not list(target.iterdir())


def test_a_cache_that_cannot_be_written_costs_a_parse(loader, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for home in (str(blocker), str(blocker / "below")):  # XDG_CACHE_HOME a file, or under one
        monkeypatch.setenv("XDG_CACHE_HOME", home)
        builds = loader.builds
        assert loader.load() == ("a", "b", "c") and loader.load() == ("a", "b", "c")
        assert loader.builds == builds + 2


def test_no_home_means_no_cache(loader, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME", raising=False)
    assert parsed_cache.cache_dir() is None
    loader.load(), loader.load()
    assert loader.builds == 2
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG spec ignores a relative one
    monkeypatch.setenv("HOME", "/home/someone")
    assert parsed_cache.cache_dir() == "/home/someone/.cache/aoti-toolchain/parsed"


def test_an_error_is_raised_and_nothing_stored(loader, cache_home):
    loader.path.write_text("bad")
    with pytest.raises(SpecError, match="bad"):
        loader.load()
    assert not list((cache_home / "aoti-toolchain" / parsed_cache.SUBDIR).glob("words-*"))


def test_a_value_marshal_cannot_store_is_used_uncached(tmp_path, cache_home):
    src = tmp_path / "x.txt"
    src.write_text("x")
    calls = []

    def build():
        calls.append(1)
        return object()

    parsed_cache.load("odd", (src,), build, lambda v: v)
    parsed_cache.load("odd", (src,), build, lambda v: v)
    assert len(calls) == 2
    assert not list((cache_home / "aoti-toolchain" / parsed_cache.SUBDIR).glob("odd-*"))


def test_a_missing_source_is_the_loaders_error(tmp_path, cache_home):
    missing = Loader(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError):
        missing.load()
    assert missing.builds == 1


# ------------------------------------------------------------------ the packaged loaders, cold, warm and without

_DUMP = """
import json, sys
from toolchain import parsed_cache
if sys.argv[1] == "cli":
    parsed_cache.enable_writes()
from toolchain import errors, findings
from toolchain.spec import load_abi, load_spec
from toolchain.spec.cpu_isa import load_isa_spec
from toolchain.verify.profiles import load_profile
tables = {"spec": load_spec(), "abi": load_abi(), "rules": findings.RULES, "exit_codes": errors.EXIT_CODES,
          "statuses": errors.RUNTIME_STATUSES, "cpu_isa": load_isa_spec(), "profile": load_profile("dgx-h200")}
json.dump({"reprs": {k: repr(v) for k, v in tables.items()}, "tomllib": "tomllib" in sys.modules}, sys.stdout)
"""


def _dump(xdg: str, who: str = "cli") -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": xdg, "PYTHONHASHSEED": "0",  # sets print in one order
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", _DUMP, who], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_packaged_loaders_give_the_same_objects_from_the_cache(tmp_path):
    """Cold (parsed, then stored), warm (every table from the cache: tomllib never imported) and without a
    cache: the same objects, types included (their reprs name every class and field)."""
    xdg = str(tmp_path / "xdg")
    cold, warm = _dump(xdg), _dump(xdg)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    without = _dump(str(blocker))
    assert cold["tomllib"] and without["tomllib"] and not warm["tomllib"]
    names = {p.name.split("-")[0] for p in (tmp_path / "xdg" / "aoti-toolchain" / parsed_cache.SUBDIR).iterdir()}
    assert names == {"spec", "abi", "rules", "exit_codes", "statuses", "cpu_isa", "profile"}
    for name in cold["reprs"]:
        assert cold["reprs"][name] == warm["reprs"][name] == without["reprs"][name], name


def test_a_spec_loaded_from_another_directory_is_not_cached(tmp_path, cache_home):
    import shutil

    from toolchain.spec import SPEC_DIR, load_spec, spec_files

    for f in spec_files():
        shutil.copy(f, tmp_path / f.name)
    assert load_spec(tmp_path).sources[0].parent == tmp_path
    assert not (cache_home / "aoti-toolchain" / parsed_cache.SUBDIR).exists()
    assert load_spec().sources[0].parent == SPEC_DIR
