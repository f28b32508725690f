"""What several commands share: reading only regular files, .npy in and out, the output directory, comparing
outputs with references."""

from __future__ import annotations

import ast
import errno
import math
import os
import stat
from pathlib import Path

from toolchain.atomic import replacing
from toolchain.errors import CompareError, InputError, UsageError

#: Largest .npy header read (the runtime's bound, runtime/tools/npy.cpp): numpy.save writes a few hundred bytes.
NPY_MAX_HEADER = 1 << 20

_FILE_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def open_regular(path: Path, what: str):
    """Open `path` for reading only if it is a regular file: opened without blocking (a FIFO with no writer
    would hang open() or read() forever) and checked by fstat on that same descriptor, so nothing can swap
    it between the check and the read. Returns a binary file object; InputError names what it is instead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        msg = f"{path}: no such file"
        raise InputError(msg, fix=f"check the path of the {what}") from None
    except OSError as exc:
        kind = "is a socket, not a regular file" if exc.errno == errno.ENXIO else f"cannot be opened: {exc.strerror}"
        msg = f"{path}: {kind}"
        raise InputError(msg, fix=f"give the path of a readable {what} file") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        msg = f"{path}: is {_file_type(st.st_mode)}, not a regular file (only regular files are read)"
        raise InputError(msg, fix=f"give the path of the {what} file")
    return os.fdopen(fd, "rb")


def check_regular(path: Path, what: str) -> None:
    open_regular(path, what).close()


def _header_descr(f, version: tuple[int, int]) -> str:
    """The 'descr' string of a header numpy has already read and validated (a dict literal of at most
    NPY_MAX_HEADER bytes): numpy turns '<V2' (ml_dtypes.bfloat16) and '|V2' (raw bytes) into the same void."""
    f.seek(8)
    n = int.from_bytes(f.read(2 if version == (1, 0) else 4), "little")
    text = f.read(n).decode("utf8" if version == (3, 0) else "latin1")
    descr = ast.literal_eval(text)["descr"]
    return descr if isinstance(descr, str) else ""


def _void_dtype(path: Path, descr: str, itemsize: int):
    """numpy's dtype for a void descr: the ml_dtypes type whose exact descr abi.toml names ('<V2' is
    bfloat16); any other void is raw bytes, refused."""
    from toolchain import runtime
    from toolchain.spec import load_abi

    d = next((d for d in load_abi().dtypes if d.runtime and d.numpy_kind == "V" and d.numpy == descr), None)
    if d is not None:
        dt = runtime.numpy_dtype(d)
        if dt is None:
            msg = f"{path}: holds {d.name} (descr {descr!r}), which needs ml_dtypes to be read"
            raise InputError(msg, fix="pip install ml_dtypes")
        return dt
    hint = (" (a bfloat16 array saved with ml_dtypes has descr '<V2': save arr.view(ml_dtypes.bfloat16))"
            if itemsize == 2 else "")
    msg = f"{path}: dtype {descr!r} is raw bytes (numpy void), not numbers{hint}"
    raise InputError(msg, fix="save a numeric array (bfloat16 via ml_dtypes, or arr.astype('<f4'))")


def load_npy(path: Path, what: str = ".npy input"):
    """A .npy array, read only after its header's shape * itemsize is checked against the file's size (from
    fstat), so a crafted header can't make numpy allocate or read more than the file holds. descr '<V2' (what
    numpy.save writes for ml_dtypes.bfloat16) comes back as an ml_dtypes.bfloat16 array."""
    import numpy as np
    from numpy.lib import format as npy_format

    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(npy_format.MAGIC_PREFIX))
        f.seek(0)
        if head != npy_format.MAGIC_PREFIX:
            msg = (f"{path}: not a .npy file (a .npy starts with {npy_format.MAGIC_PREFIX!r}, this file with "
                   f"{head!r})")
            raise InputError(msg, fix="save arrays with numpy.save(path, array); text, .npz and pickles are not read")
        try:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, _fortran, dtype = npy_format.read_array_header_1_0(f, max_header_size=NPY_MAX_HEADER)
            elif version in ((2, 0), (3, 0)):
                shape, _fortran, dtype = npy_format.read_array_header_2_0(f, max_header_size=NPY_MAX_HEADER)
            else:
                msg = f"unsupported .npy format version {version}"
                raise ValueError(msg)
            if dtype.hasobject:
                msg = "an object array (it holds Python objects, not numbers)"
                raise ValueError(msg)
            need = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
            have = size - f.tell()
            if need != have:
                what_is = "truncated data" if have < need else f"{have - need} bytes after the data"
                msg = (f"{what_is}: shape {tuple(shape)} of {dtype.str} needs {need} bytes after the header, "
                       f"the file has {have}")
                raise ValueError(msg)
            view_as = None
            if dtype.kind == "V" and dtype.names is None and dtype.subdtype is None:
                view_as = _void_dtype(path, _header_descr(f, version), dtype.itemsize)
            f.seek(0)
            array = np.load(f, allow_pickle=False, max_header_size=NPY_MAX_HEADER)
            return array if view_as is None else array.view(view_as)
        except (ValueError, OSError, EOFError, SyntaxError, KeyError) as exc:
            msg = f"{path}: not a valid .npy file: {exc}"
            raise InputError(msg, fix="save inputs with numpy.save(path, array)") from exc


def prepare_outdir(path: Path) -> list[Path]:
    """Create the output directory (and parents) and check files can be made in it, before any work:
    an unusable -o is a bad input, found early, with nothing written. Returns the directories it created,
    deepest first, for remove_created() when the command then fails."""
    created = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        created.append(p)
        p = p.parent
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # mkdir below says why it can't be made
        st = None
    except OSError as exc:
        msg = f"{path}: cannot use as the output directory: {exc.strerror}"
        raise InputError(msg, fix="choose another -o") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        msg = f"{path}: exists and is {_file_type(st.st_mode)}, not a directory"
        raise InputError(msg, fix="choose another -o")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"{path}: cannot create the output directory: {exc.strerror or exc}"
        raise InputError(msg, fix="choose another -o (a path under a directory you can write)") from None
    if not os.access(path, os.W_OK | os.X_OK):
        msg = f"{path}: the output directory is not writable"
        raise InputError(msg, fix="choose another -o or fix its permissions")
    return created


def remove_created(dirs: list[Path]) -> None:
    """Remove the directories prepare_outdir created, deepest first, each only while still empty: a command
    that fails after making its -o leaves no trace."""
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            return


def save_npy(path: Path, array) -> None:
    """Write atomically (toolchain.atomic); a path that can't take the file is an InputError, nothing left."""
    import numpy as np

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        msg = f"{path}: cannot write: {exc.strerror or exc}"
        raise InputError(msg, fix="choose another output directory") from None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        msg = f"{path}: exists and is {_file_type(st.st_mode)}, not a file this command may replace"
        raise InputError(msg, fix="remove it or choose another output directory")
    try:
        with replacing(path, suffix=".npy") as tmp, tmp.open("wb") as f:
            np.save(f, np.ascontiguousarray(array))
    except OSError as exc:
        msg = f"{path}: cannot write: {exc.strerror or exc}"
        raise InputError(msg, fix="check the output directory exists, is writable and has free space") from None


def compare(outputs, refs, atol: float, rtol: float, names: list[str] | None = None) -> list[str]:
    """Lines describing each output (named `names`, default output_<k>) against its reference; raises
    CompareError on a mismatch."""
    import numpy as np

    names = names or [f"output_{k}" for k in range(len(outputs))]
    if len(refs) != len(outputs):
        msg = f"{len(refs)} reference(s) for {len(outputs)} output(s)"
        raise UsageError(msg)
    lines, bad = [], []
    for k, (out, ref) in enumerate(zip(outputs, refs, strict=True)):
        if out.shape != ref.shape:
            bad.append(f"{names[k]}: shape {list(out.shape)}, reference {list(ref.shape)}")
            continue
        out64, ref64 = out.astype(np.float64), ref.astype(np.float64)  # bfloat16 (ml_dtypes) too
        err = float(np.max(np.abs(out64 - ref64))) if out.size else 0.0
        ok = bool(np.allclose(out64, ref64, atol=atol, rtol=rtol))
        lines.append(f"{names[k]}: max abs error {err:.3g} ({'ok' if ok else 'MISMATCH'})")
        if not ok:
            bad.append(lines[-1])
    if bad and len(lines) < len(outputs):  # a shape differs: no tolerance can help
        msg = "outputs differ from the references: " + "; ".join(bad)
        raise CompareError(msg, fix="the shapes differ: give the reference of each output, in order, computed "
                           "from the same inputs (export --save-inputs writes matching ones)")
    if bad:
        msg = "outputs differ from the references: " + "; ".join(bad)
        raise CompareError(msg, fix=f"atol={atol} rtol={rtol}; loosen them only if the model is numerically noisy")
    return lines


