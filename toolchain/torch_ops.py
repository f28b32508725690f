"""Torch's fallback ops as data: which ATen op each `aoti_torch_<device>_*` shim calls, on which device, and
the torch version that first emits it. Read from toolchain/torch_ops.json, which `python -m toolchain.coverage`
extracts from the installed torch (torchgen/aoti/fallback_ops.py and the shim headers) and a test keeps in
sync; verify, inspect and the runtime's load error name the ATen op of a shim through it, without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from toolchain.errors import SpecError

DATA_FILE = Path(__file__).resolve().parent / "torch_ops.json"
SCHEMA = 1
DEVICES = ("cpu", "cuda", "aten")  # aten: the device-agnostic shims of c_shim_aten.h


@dataclass(frozen=True)
class TorchOp:
    """One torch fallback op, its variant and first torch version, and the shims that call it."""

    op: str  # e.g. aten.topk.default (namespace.name.overload as torch.ops spells it)
    variant: int  # the fallback_ops.py version: shim names of variant N > 1 end in _vN
    since: str  # the torch version that first declares it, e.g. "2.13"
    source: str  # inductor_fallback_ops | aten_shimified_ops | c/shim_cpu.h
    shims: dict[str, str]  # device (cpu | cuda | aten) -> shim name; absent where torch declares none

    @property
    def label(self) -> str:
        """The op as messages name it: aten.topk.default, or aten.x.default (v2) for a later variant."""
        return self.op if self.variant == 1 else f"{self.op} (v{self.variant})"


@dataclass(frozen=True)
class TorchOps:
    """toolchain/torch_ops.json: the fallback ops of the torch it was extracted from."""

    torch: str  # the torch version the data was extracted from
    sources: dict[str, str]  # column/field -> where it comes from
    ops: tuple[TorchOp, ...]

    def by_shim(self) -> dict[str, tuple[TorchOp, str]]:
        """shim name -> (op, device)."""
        return {name: (op, dev) for op in self.ops for dev, name in op.shims.items()}


def _bad(path: Path, reason: str) -> SpecError:
    return SpecError(f"{path}: {reason}", fix="regenerate it with python -m toolchain.coverage --markdown "
                     "docs/ops-coverage.md (with torch installed), or restore it from git")


def parse(doc: object, path: Path = DATA_FILE) -> TorchOps:
    """Validate the JSON document; SpecError names the file and the defect."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise _bad(path, f"not a schema-{SCHEMA} torch-ops document")
    torch, sources, rows = doc.get("torch"), doc.get("sources"), doc.get("ops")
    if not isinstance(torch, str) or not isinstance(sources, dict) or not isinstance(rows, list):
        raise _bad(path, "torch, sources or ops is missing or of the wrong type")
    ops = []
    for i, r in enumerate(rows):
        ok = (isinstance(r, dict) and isinstance(r.get("op"), str) and type(r.get("variant")) is int
              and isinstance(r.get("since"), str) and isinstance(r.get("source"), str)
              and isinstance(r.get("shims"), dict) and set(r["shims"]) <= set(DEVICES)
              and all(isinstance(v, str) and v.startswith("aoti_torch_") for v in r["shims"].values()))
        if not ok:
            raise _bad(path, f"ops[{i}] is not an object with op, variant, since, source and shims "
                       f"({'/'.join(DEVICES)} -> aoti_torch_* name)")
        ops.append(TorchOp(r["op"], r["variant"], r["since"], r["source"], dict(r["shims"])))
    return TorchOps(torch, {str(k): str(v) for k, v in sources.items()}, tuple(ops))


def to_json(data: TorchOps) -> str:
    import json

    doc = {"schema": SCHEMA, "torch": data.torch, "sources": data.sources,
           "ops": [{"op": o.op, "variant": o.variant, "since": o.since, "source": o.source, "shims": o.shims}
                   for o in data.ops]}
    return json.dumps(doc, indent=1) + "\n"


@cache
def load(path: Path = DATA_FILE) -> TorchOps:
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _bad(path, f"cannot be read: {exc.strerror}") from None
    except ValueError as exc:
        raise _bad(path, f"not valid JSON: {exc}") from None
    return parse(doc, path)


def op_of(shim: str) -> tuple[TorchOp, str] | None:
    """(the fallback op a shim calls, its device) or None for a shim that is no fallback op (the core ABI)."""
    return load().by_shim().get(shim)
