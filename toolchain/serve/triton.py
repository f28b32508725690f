"""NVIDIA Triton Inference Server with the aoti_toolchain backend (runtime/triton/): model repositories written
from packages' contracts (`aoti-toolchain triton-repo`) and the backend directory to give the server
(`aoti-toolchain triton-backend-dir`). No torch, no Ray, nothing of Triton's: the model configuration is
toolchain.serve's (ModelMeta.config, the JSON `GET /v2/models/<m>/config` returns), written as config.pbtxt.

A repository holds one Triton model per method: a package (`m.pt2`) is the model `m`; a program of several
methods (a directory with methods.json) is `prog.<method>` for each method, each with the whole program in its
version directory (hard links where the file system has them: the bytes are stored once) and its method in
`parameters`. See docs/serving.md."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.atomic import replacing, write_text
from toolchain.errors import InputError, LoadError, UsageError
from toolchain.serve.backend import MANIFEST_NAME, describe, method_packages
from toolchain.serve.protocol import ModelMeta
from toolchain.spec.records import RECORDS

BACKEND = "aoti_toolchain"  # backends/<BACKEND>/libtriton_<BACKEND>.so
BACKEND_LIBRARY = f"libtriton_{BACKEND}.so"
VERSION = "1"
#: max_batch_size when the batch dimension has no upper bound in the contract and none is asked for
UNBOUNDED_BATCH = 16
KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}


@dataclass(frozen=True)
class Options:
    instances: int = 1  # instance_group count (per GPU for KIND_GPU)
    kind: str = "cpu"  # cpu | gpu
    gpus: tuple[int, ...] = ()  # KIND_GPU: which GPUs (empty: all)
    cuda_graphs: bool = False
    max_batch: int | None = None  # cap on max_batch_size (0: never batch); None: the contract's maximum
    batch_delay_us: int = 0  # dynamic_batching's max_queue_delay_microseconds


@dataclass(frozen=True)
class RepoModel:
    """One Triton model of a repository: its name, the method it serves, its configuration (JSON form)."""

    name: str
    method: str
    config: dict[str, Any]
    source: Path  # the package, or the program's methods.json
    files: dict[str, Path]  # version-directory file name -> the file it is a copy of


class _Methods:
    """What describe() asks of a program, from its files alone (nothing is loaded: a CUDA package is
    described on a machine without a GPU, and no plugin runs)."""

    inputs: tuple[Any, ...] = ()
    outputs: tuple[Any, ...] = ()

    def __init__(self, methods: tuple[str, ...]) -> None:
        self.methods = methods


def program_files(path: Path) -> tuple[Path, dict[str, Path]]:
    """(the program's source, method -> package) for a .pt2 (no methods: the package alone), a directory of
    method packages (its methods.json) or a methods.json."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory", fix="pass a .pt2 package or a program's directory")
    if path.is_file() and path.suffix == ".pt2":
        return path, {}
    manifest = path / MANIFEST_NAME if path.is_dir() else path
    packages = method_packages(path) if manifest.is_file() else {}
    if not packages:
        msg = f"{path}: neither a .pt2 package nor a program of several methods (a directory with {MANIFEST_NAME})"
        raise InputError(msg, fix="export it with aoti-toolchain export (toolchain.export.export_methods for methods)")
    for method, pkg in packages.items():
        if not pkg.is_file():
            raise InputError(f"{path}: method {method!r}: {pkg} is missing", fix="export the program again")
    return manifest, packages


def models_of(path: Path, name: str | None = None, options: Options = Options()) -> list[RepoModel]:
    """The Triton models of the program at `path` (one per method), their configurations derived from the
    contract by toolchain.serve (describe, ModelMeta.config) and completed for this backend."""
    source, packages = program_files(path)
    methods = tuple(packages) or ("forward",)
    described, notes = describe(_Methods(methods), Path(path), name)
    if notes:
        raise InputError(f"{path}: {'; '.join(notes)}", fix="record a contract (aoti-toolchain contract add) or "
                         "export the program with aoti-toolchain export")
    base = next(iter(described))
    if len(methods) == 1:
        chosen = [described[base]]
    else:  # <name>.<method> for each method; <name> alone would load the program once more
        chosen = [m for key, m in described.items() if key != base]
    if packages:
        files = {f"{m}.pt2": p for m, p in packages.items()}
        files[MANIFEST_NAME] = source  # rewritten: each method's package named <method>.pt2
    else:
        files = {"model.pt2": source}
    return [RepoModel(meta.name, meta.method, model_config(meta, options), source, files) for meta in chosen]


def model_config(meta: ModelMeta, options: Options) -> dict[str, Any]:
    """ModelMeta.config for this backend: batched (max_batch_size, dynamic_batching) when dimension 0 is one
    size symbol everywhere (meta.batch) and `options.max_batch` allows; the instance group; the method and
    cuda_graphs parameters."""
    for t in (*meta.inputs, *meta.outputs):
        if t.datatype is None or t.shape is None:
            msg = f"model {meta.name}: {t.name} has no datatype or rank in the contract"
            raise InputError(msg, fix="export the program with aoti-toolchain export (it records a contract)")
    max_batch = 0
    if meta.batch is not None and options.max_batch != 0:
        hi = meta.batch[1]
        cap = options.max_batch if options.max_batch is not None else hi if hi is not None else UNBOUNDED_BATCH
        max_batch = min(cap, hi) if hi is not None else cap
    cfg = meta.config(max_batch)
    cfg.pop("platform", None)  # Triton names the platform of a custom backend itself
    if max_batch and options.batch_delay_us:
        cfg["dynamic_batching"] = {"max_queue_delay_microseconds": options.batch_delay_us}
    group: dict[str, Any] = {"kind": KINDS[options.kind], "count": options.instances}
    if options.kind == "gpu" and options.gpus:
        group["gpus"] = list(options.gpus)
    cfg["instance_group"] = [group]
    if options.cuda_graphs:
        cfg["parameters"]["cuda_graphs"] = {"string_value": "true"}
    return cfg


def _q(text: str) -> str:
    return json.dumps(text)  # a protobuf text-format string literal: JSON's escapes are a subset


def to_pbtxt(cfg: dict[str, Any]) -> str:
    """config.pbtxt (protobuf text format) of a configuration model_config made."""

    def tensor(t: dict[str, Any]) -> str:
        dims = ", ".join(str(d) for d in t["dims"])
        return f"  {{ name: {_q(t['name'])} data_type: {t['data_type']} dims: [ {dims} ] }}"

    lines = [f"name: {_q(cfg['name'])}", f"backend: {_q(cfg['backend'])}", f"max_batch_size: {cfg['max_batch_size']}"]
    for key in ("input", "output"):
        lines += [f"{key} [", ",\n".join(tensor(t) for t in cfg[key]), "]"]
    if "dynamic_batching" in cfg:
        delay = cfg["dynamic_batching"].get("max_queue_delay_microseconds")
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {delay} }}" if delay else
                     "dynamic_batching { }")
    groups = []
    for g in cfg["instance_group"]:
        gpus = f" gpus: [ {', '.join(str(i) for i in g['gpus'])} ]" if g.get("gpus") else ""
        groups.append(f"  {{ kind: {g['kind']} count: {g['count']}{gpus} }}")
    lines += ["instance_group [", ",\n".join(groups), "]"]
    for key, value in cfg["parameters"].items():
        lines.append(f"parameters {{ key: {_q(key)} value: {{ string_value: {_q(value['string_value'])} }} }}")
    return "\n".join(lines) + "\n"


def _place(src: Path, target: Path, link_from: Path | None) -> None:
    """`target` becomes a copy of `src` atomically: a hard link to `link_from` (an identical file already
    written into this repository) where the file system allows, else a copy."""
    with replacing(target) as tmp:
        if link_from is not None:
            try:
                tmp.unlink()
                os.link(link_from, tmp)
                return
            except OSError:
                pass
        shutil.copyfile(src, tmp)


def write_models(models: list[RepoModel], repo: Path) -> list[Path]:
    """Write each model's `repo/<name>/1/` files, then its config.pbtxt (last, so a polling server never
    finds a configuration without its model); every file is replaced atomically. Artifacts of an earlier
    write that this one does not have are removed (the backend takes model.pt2 before methods.json).
    Returns the model directories."""
    written: dict[Path, Path] = {}  # source file -> its first copy in this repository (for hard links)
    dirs = []
    for model in models:
        mdir = Path(repo) / model.name
        vdir = mdir / VERSION
        vdir.mkdir(parents=True, exist_ok=True)
        for fname, src in model.files.items():
            target = vdir / fname
            if fname == MANIFEST_NAME:
                doc = json.loads(src.read_text(encoding="utf-8"))
                key, entry = RECORDS.methods.methods, RECORDS.method
                doc[key] = [{**m, entry.package: f"{m[entry.name]}.pt2"} for m in doc[key]]
                write_text(target, json.dumps(doc, indent=1) + "\n")
                continue
            _place(src, target, written.get(src.resolve()))
            written.setdefault(src.resolve(), target)
        for stale in vdir.iterdir():
            if stale.is_file() and stale.name not in model.files and (stale.suffix == ".pt2" or
                                                                       stale.name == MANIFEST_NAME):
                stale.unlink()
        write_text(mdir / "config.pbtxt", to_pbtxt(model.config))
        dirs.append(mdir)
    return dirs


def repository(sources: list[Path], repo: Path, *, name: str | None = None, options: Options = Options()) -> list[RepoModel]:
    """`aoti-toolchain triton-repo`: the models of every source, written into `repo`."""
    if name is not None and len(sources) != 1:
        raise UsageError("--name names one program: give one source with it", fix="drop --name, or give one source")
    models: list[RepoModel] = []
    for src in sources:
        models += models_of(Path(src), name, options)
    seen: dict[str, Path] = {}
    for m in models:
        if m.name in seen:
            msg = f"two models would be named {m.name!r} ({seen[m.name]} and {m.source})"
            raise UsageError(msg, fix="rename one of the files (the model name is the file's stem)")
        seen[m.name] = m.source
    write_models(models, Path(repo))
    return models


def backend_dirs(device: str = "cpu") -> list[Path]:
    """The directories to pass as tritonserver's --backend-directory, in the order `triton-backend-dir`
    prefers them: an installed wheel's runtime tree (toolchain/_host/triton), then this checkout's builds
    (build/<variant>/dist/triton), CUDA ones first for device cuda."""
    from toolchain.hostlib import host_trees

    return [tree / "triton" for tree in host_trees(device)]


def backend_dir(device: str = "cpu") -> Path:
    """The first of backend_dirs() that holds aoti_toolchain/libtriton_aoti_toolchain.so and the runtime
    library it loads."""
    for d in backend_dirs(device):
        if (d / BACKEND / BACKEND_LIBRARY).is_file() and (d / BACKEND / "libaoti_host.so").is_file():
            return d
    tried = ", ".join(str(d) for d in backend_dirs(device))
    msg = f"no Triton backend found (looked in {tried})"
    raise LoadError(msg, fix="build it (scons, in a checkout) or pip install aoti-toolchain")
