"""What a replica serves: a program's methods as v2 models, their metadata read from the contract, and runs
(one request, or several batched along the contract's dynamic dimension 0). No Ray and no torch here: the
program runs through toolchain.runtime (or any object with the same `methods`/`inputs`/`outputs`/`run`)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from toolchain import torch_contract
from toolchain.contract import method_packages
from toolchain.errors import InputError, ToolchainError
from toolchain.serve.protocol import CONTRACT_DATATYPES, ModelMeta, TensorMeta, V2Error, datatype_of
from toolchain.spec import load_abi
from toolchain.spec.records import RECORDS

_LAYOUT = load_abi().package
# the contract's JSON keys (toolchain/spec/records.toml), shared with the exporter and the runtime
_CONTRACT, _TENSOR, _DIM = RECORDS.contract, RECORDS.contract_tensor, RECORDS.contract_dim
MANIFEST_NAME = _LAYOUT.methods_manifest
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]")

Result = list[np.ndarray] | Exception
_log = logging.getLogger("toolchain.serve")
Submit = Callable[[tuple[ModelMeta, list[np.ndarray]]], Awaitable[Result]]


class Runner(Protocol):
    """What a backend runs: toolchain.runtime.Program has this shape."""

    methods: tuple[str, ...]
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]

    def run(self, inputs: Sequence[np.ndarray], *, method: str | None = None) -> list[np.ndarray]: ...


def model_name(path: Path) -> str:
    """The default model name of a package or program directory: its file stem (or directory name)."""
    p = Path(path)
    stem = p.parent.name if p.name == MANIFEST_NAME else (p.name if p.is_dir() else p.stem)
    return _NAME_OK.sub("_", stem) or "model"


def read_contract(package: Path) -> dict[str, Any] | None:
    """The contract of a package: the one it records, else the one derived from what torch wrote into it
    (toolchain.torch_contract); None for a plugin .so or a package with neither."""
    return contract_and_why(package)[0]


def contract_and_why(package: Path) -> tuple[dict[str, Any] | None, str]:
    """(the package's contract, "recorded" or "derived"), or (None, why there is none)."""
    if Path(package).suffix != ".pt2":
        return None, "a bare plugin holds no contract"
    doc, why = torch_contract.contract_for(package)
    ok = (isinstance(doc, dict) and isinstance(doc.get(_CONTRACT.inputs), list)
          and isinstance(doc.get(_CONTRACT.outputs), list))
    return (doc, why) if ok else (None, why if doc is None else "its contract is not what the exporter writes")


def _meta_from_contract(entry: Any, fallback: str) -> TensorMeta:
    if not isinstance(entry, dict):
        return TensorMeta(fallback, None, None)
    raw_name, raw_dtype = entry.get(_TENSOR.name), entry.get(_TENSOR.dtype)
    name: str = raw_name if isinstance(raw_name, str) else fallback
    datatype = CONTRACT_DATATYPES.get(raw_dtype) if isinstance(raw_dtype, str) else None
    raw = entry.get(_TENSOR.shape)
    if not isinstance(raw, list):
        return TensorMeta(name, datatype, None)
    shape: list[int] = []
    lo: list[int] = []
    hi: list[int | None] = []
    exprs: list[str | None] = []
    for d in raw:
        if type(d) is int and d >= 0:
            shape.append(d)
            lo.append(d)
            hi.append(d)
            exprs.append(None)
        elif isinstance(d, dict):
            shape.append(-1)
            lo.append(d[_DIM.min] if type(d.get(_DIM.min)) is int else 0)
            hi.append(d[_DIM.max] if type(d.get(_DIM.max)) is int else None)
            exprs.append(d[_DIM.expr] if isinstance(d.get(_DIM.expr), str) else None)
        else:
            return TensorMeta(name, datatype, None)
    return TensorMeta(name, datatype, tuple(shape), tuple(lo), tuple(hi), tuple(exprs))


def _meta_from_spec(spec: Any) -> TensorMeta:
    """From the runtime's TensorSpec (the C API's view of method 0): no dimension ranges."""
    datatype = datatype_of(spec.dtype) if spec.dtype is not None else None
    shape = tuple(-1 if n is None else n for n in spec.shape) if spec.shape is not None else None
    return TensorMeta(spec.name, datatype, shape)


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _batch_range(inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta]) -> tuple[int, int | None] | None:
    """(min, max) rows along dimension 0 when it is one and the same size symbol of the contract in every
    input and output (a batch dimension: requests can be stacked along it and their outputs split back),
    else None. Without recorded expressions (a schema-1 contract, or the runtime's specs) a dynamic
    dimension 0 everywhere is taken as that dimension."""
    tensors = (*inputs, *outputs)
    if not inputs or not outputs or any(not t.shape or t.shape[0] != -1 for t in tensors):
        return None
    symbols = {t.exprs[0] if t.exprs else None for t in tensors}
    if symbols != {None} and (len(symbols) != 1 or not _SYMBOL.fullmatch(str(next(iter(symbols))))):
        return None
    lo = max(t.min_shape[0] if t.min_shape else 0 for t in inputs)
    if lo > 1:  # a batcher sends any number of rows from 1 up: a plugin compiled for >= 2 would refuse one
        return None
    highs = [t.max_shape[0] for t in inputs if t.max_shape and t.max_shape[0] is not None]
    return (max(lo, 1), min(highs) if highs else None)


def describe(runner: Runner, path: Path, name: str | None = None) -> tuple[dict[str, ModelMeta], list[str]]:
    """The v2 models of a program: `name` serves the first method; a program of several methods also serves
    each as `name.method`. Returns (models, notes on methods left out)."""
    base = _NAME_OK.sub("_", name) if name else model_name(path)
    packages = method_packages(path)
    notes: list[str] = []
    models: dict[str, ModelMeta] = {}
    for k, method in enumerate(runner.methods):
        package = packages[method] if method in packages else path
        contract, why = contract_and_why(package)
        if contract is not None:
            ins = tuple(_meta_from_contract(e, f"input_{i}") for i, e in enumerate(contract[_CONTRACT.inputs]))
            outs = tuple(_meta_from_contract(e, f"output_{i}") for i, e in enumerate(contract[_CONTRACT.outputs]))
        else:
            ins = tuple(_meta_from_spec(s) for s in runner.inputs) if k == 0 else ()
            outs = tuple(_meta_from_spec(s) for s in runner.outputs) if k == 0 else ()
            if k != 0 or not ins or any(t.datatype is None or t.shape is None for t in (*ins, *outs)):
                # metadata without datatypes or ranks would make clients build requests that fail
                fix = torch_contract.add_command(package) if Path(package).suffix == ".pt2" else \
                    "serve the .pt2 the plugin came from"
                notes.append(f"method {method!r}: {why}: its metadata would be incomplete; not served (fix: {fix})")
                continue
        meta = ModelMeta(base, method, ins, outs, _batch_range(ins, outs))
        if k == 0:
            models[base] = meta
        if len(runner.methods) > 1:
            full = f"{base}.{_NAME_OK.sub('_', method)}"
            models[full] = ModelMeta(full, method, ins, outs, meta.batch)
    return models, notes


class ProgramBackend:
    """The protocol's Backend over one loaded program. Runs go to one worker thread, in order (the event
    loop stays free for health checks and parsing); `submit`, when a replica installs one (Ray Serve's
    batcher), receives the requests of batchable models and calls `run_many`."""

    def __init__(self, runner: Runner, path: Path, *, name: str | None = None, max_batch: int = 0) -> None:
        self.runner = runner
        models, self.notes = describe(runner, Path(path), name)
        self.models: Mapping[str, ModelMeta] = models
        if not self.models:
            msg = f"{path}: no method of the program can be served: {'; '.join(self.notes)}"
            raise InputError(msg, fix="record a contract: aoti-toolchain contract add PKG.pt2 --example-inputs "
                             "INPUT.npy ... -o OUT.pt2 (or export the model with aoti-toolchain export)")
        self.max_batch = max(0, int(max_batch))
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aoti-run")
        self.submit: Submit | None = None
        # infer calls, program runs (fewer when batched), and the seconds spent in the program's runs
        self.counts: dict[str, float] = {"requests": 0, "runs": 0, "run_seconds": 0.0}
        self._ready = True

    def ready(self) -> bool:
        return self._ready

    def batchable(self) -> bool:
        return self.max_batch > 1 and any(m.batch is not None for m in self.models.values())

    async def infer(self, model: ModelMeta, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self.counts["requests"] += 1
        if self.submit is not None and model.batch is not None and self.max_batch > 1:
            result = await self.submit((model, inputs))
        else:
            result = await asyncio.get_running_loop().run_in_executor(self.executor, self._run_safe, model, inputs)
        if isinstance(result, Exception):
            raise result
        return result

    def run_one(self, model: ModelMeta, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.counts["runs"] += 1
        t0 = time.perf_counter()
        try:
            return self.runner.run(list(inputs), method=model.method)
        except InputError as exc:  # the runtime's (or the plugin's own) input check: the request's fault
            _log.warning("model %s: request refused: %s", model.name, exc)
            raise V2Error(400, str(exc)) from None
        except ToolchainError as exc:
            _log.error("model %s: the program failed: %s", model.name, exc)
            raise V2Error(500, f"the program failed: {exc}") from None
        finally:
            self.counts["run_seconds"] += time.perf_counter() - t0

    def _run_safe(self, model: ModelMeta, inputs: Sequence[np.ndarray]) -> Result:
        try:
            return self.run_one(model, inputs)
        except Exception as exc:
            return exc

    def run_many(self, items: Sequence[tuple[ModelMeta, list[np.ndarray]]]) -> list[Result]:
        """Results of several requests, in order: requests of one model whose inputs agree beyond dimension 0
        run as one batch (concatenated along dimension 0, at most max_batch and the contract's maximum rows
        per run) and their outputs are split back; anything else runs alone. Never raises."""
        results: list[Result | None] = [None] * len(items)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, (model, inputs) in enumerate(items):
            key = (model.name, tuple((a.dtype.str, a.shape[1:]) for a in inputs)) if model.batch else ("", i)
            groups.setdefault(key, []).append(i)
        for members in groups.values():
            model = items[members[0]][0]
            cap = self.max_batch if model.batch is None or model.batch[1] is None else min(self.max_batch,
                                                                                           model.batch[1])
            chunk: list[int] = []
            rows = 0
            for i in [*members, -1]:
                n = items[i][1][0].shape[0] if i >= 0 else 0
                if chunk and (i < 0 or rows + n > cap):
                    for j, r in zip(chunk, self._run_chunk(model, [items[j][1] for j in chunk]), strict=True):
                        results[j] = r
                    chunk, rows = [], 0
                if i >= 0:
                    chunk.append(i)
                    rows += n
        return [r if r is not None else RuntimeError("no result") for r in results]

    def _run_chunk(self, model: ModelMeta, requests: list[list[np.ndarray]]) -> list[Result]:
        if len(requests) == 1:
            return [self._run_safe(model, requests[0])]
        sizes = [r[0].shape[0] for r in requests]
        total = sum(sizes)
        try:
            stacked = [np.concatenate([r[k] for r in requests], axis=0) for k in range(len(requests[0]))]
            outs = self.run_one(model, stacked)
            if all(o.ndim >= 1 and o.shape[0] == total for o in outs):
                cuts = np.cumsum(sizes)[:-1]
                split = [np.split(o, cuts, axis=0) for o in outs]
                return [[s[j] for s in split] for j in range(len(requests))]
        except Exception:
            pass  # run them one by one: each gets its own result or error
        return [self._run_safe(model, r) for r in requests]

    def close(self) -> None:
        self._ready = False
        self.executor.shutdown(wait=True)
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()
