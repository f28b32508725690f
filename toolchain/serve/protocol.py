"""The KServe/Triton v2 inference protocol over HTTP, as a plain ASGI application (no Ray, no torch).

Endpoints (https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/):

    GET  /v2                                         server metadata
    GET  /v2/health/live, /v2/health/ready           200 when live / ready
    GET  /v2/models/{model}[/versions/{v}]           model metadata (from the program's contract)
    GET  /v2/models/{model}[/versions/{v}]/ready     200 when the model is ready
    GET  /v2/models/{model}[/versions/{v}]/config    a Triton-style model configuration (JSON)
    POST /v2/models/{model}[/versions/{v}]/infer     inference: JSON tensor data, or the binary tensor
                                                     data extension (Inference-Header-Content-Length)
    POST /v2/repository/index                        the models and their state

Errors are `{"error": "<message>"}` with an HTTP error status: 400 for a bad request (malformed JSON,
wrong datatype, a shape outside the contract, unknown input or output names), 404 for an unknown model,
version or route, 405 for a wrong HTTP method, 411/413 for a missing or too large body, 500 when the
program fails, 503 while not ready. No request, however malformed, raises out of the application.

The application serves a `Backend` (toolchain.serve.backend.ProgramBackend in practice); Ray Serve wraps
it as its ingress (toolchain.serve.deploy), and any ASGI server (uvicorn) can run it without Ray.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

SERVER_NAME = "aoti-toolchain"
PLATFORM = "aoti_toolchain"
EXTENSIONS = ("binary_tensor_data", "model_repository")  # model_repository: the index call only
HEADER_LENGTH = "inference-header-content-length"
DEFAULT_MAX_BODY_BYTES = 64 << 20

# v2 datatype <-> numpy dtype (little-endian on the wire, as the binary extension specifies)
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype("bool"), "UINT8": np.dtype("u1"), "INT8": np.dtype("i1"), "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"), "INT64": np.dtype("<i8"), "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"), "UINT16": np.dtype("<u2"), "UINT32": np.dtype("<u4"), "UINT64": np.dtype("<u8"),
}
# contract dtype names (torch's, without "torch.") -> v2 datatype
CONTRACT_DATATYPES = {
    "bool": "BOOL", "uint8": "UINT8", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "bfloat16": "BF16", "uint16": "UINT16",
    "uint32": "UINT32", "uint64": "UINT64",
}


def datatype_of(dtype: np.dtype[Any]) -> str:
    for name, dt in DATATYPES.items():
        if dt == dtype.newbyteorder("<") or dt == dtype:
            return name
    return str(dtype).upper()


class V2Error(Exception):
    """An error response: HTTP `status` and the message of the protocol's `{"error": ...}` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class TensorMeta:
    """One input or output as the contract describes it: -1 marks a dynamic dimension (with its range)."""

    name: str
    datatype: str | None  # None: the program has no contract for it (any supported datatype)
    shape: tuple[int, ...] | None  # None: rank unknown
    min_shape: tuple[int, ...] | None = None
    max_shape: tuple[int | None, ...] | None = None
    # each dimension's size expression over the program's size symbols ("s77"; schema 2), None where the
    # contract records none (a static size, or a schema-1 dynamic dimension: a size of its own)
    exprs: tuple[str | None, ...] | None = None

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype or "",
                "shape": list(self.shape) if self.shape is not None else [-1]}


@dataclass(frozen=True)
class ModelMeta:
    """A served model: one method of a program. `batch` is (min, max) rows along dimension 0 when dimension
    0 of every input and output is one and the same size symbol of the contract (requests may then be
    batched), else None."""

    name: str
    method: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    batch: tuple[int, int | None] | None = None
    versions: tuple[str, ...] = ("1",)
    extra: dict[str, Any] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "versions": list(self.versions), "platform": PLATFORM,
                "inputs": [t.metadata() for t in self.inputs], "outputs": [t.metadata() for t in self.outputs]}

    def config(self, max_batch: int = 0) -> dict[str, Any]:
        """Triton's model configuration (the JSON form of config.pbtxt) derived from the contract: with
        batching, dimension 0 leaves `dims` and becomes max_batch_size, as Triton expects."""
        batched = self.batch is not None and max_batch > 0

        def dims(t: TensorMeta) -> list[int]:
            shape = list(t.shape) if t.shape is not None else [-1]
            return shape[1:] if batched else shape

        def entry(t: TensorMeta) -> dict[str, Any]:
            return {"name": t.name, "data_type": f"TYPE_{t.datatype or 'INVALID'}", "dims": dims(t)}

        cfg: dict[str, Any] = {"name": self.name, "platform": PLATFORM, "backend": "aoti_toolchain",
                               "max_batch_size": max_batch if batched else 0,
                               "input": [entry(t) for t in self.inputs], "output": [entry(t) for t in self.outputs],
                               "parameters": {"method": {"string_value": self.method}}}
        if batched:
            cfg["dynamic_batching"] = {}
        return cfg


class Backend(Protocol):
    models: Mapping[str, ModelMeta]
    max_batch: int

    def ready(self) -> bool: ...

    async def infer(self, model: ModelMeta, inputs: list[np.ndarray]) -> list[np.ndarray]: ...


@dataclass
class Response:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]


def json_response(status: int, obj: Any) -> Response:
    return Response(status, json.dumps(obj, separators=(",", ":")).encode(), [(b"content-type", b"application/json")])


def error_response(status: int, message: str) -> Response:
    return json_response(status, {"error": message})


# ---------------------------------------------------------------------------------------------- requests

#: what a minimum of 2 means where a request has size 0 or 1 (the runtime's own refusal says the same)
SPECIALISED_01 = ("; torch compiled it for sizes >= 2 there (it specialises sizes 0 and 1 while tracing, so a "
                  "dynamic dimension declared with min=1 is compiled for >= 2): re-export with aoti-toolchain "
                  "export and a minimum of 0 or 1, which compiles size-obliviously")


def _dims_ok(shape: Sequence[int], meta: TensorMeta) -> str | None:
    """Why `shape` is outside the contract's, or None."""
    if meta.shape is None:
        return None
    if len(shape) != len(meta.shape):
        return f"has rank {len(shape)}, the model takes rank {len(meta.shape)} {list(meta.shape)}"
    for d, (n, want) in enumerate(zip(shape, meta.shape, strict=True)):
        if want >= 0 and n != want:
            return f"dimension {d} is {n}, the model takes {want} (shape {list(meta.shape)})"
        if want < 0:
            lo = meta.min_shape[d] if meta.min_shape is not None else 0
            hi = meta.max_shape[d] if meta.max_shape is not None else None
            if n < lo or (hi is not None and n > hi):
                rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
                why = SPECIALISED_01 if n <= 1 and lo == 2 else ""
                return f"dimension {d} is {n}, the model takes {rng}{why}"
    return None


def _shape_of(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(n) is int and n >= 0 for n in value):
        raise V2Error(400, f"{where}: 'shape' must be a list of non-negative integers")
    if len(value) > 32:
        raise V2Error(400, f"{where}: rank {len(value)} is too large")
    return tuple(value)


def _flatten(data: Any, out: list[Any], depth: int = 0) -> None:
    if isinstance(data, list):
        if depth > 32:
            raise ValueError("nested too deeply")
        for v in data:
            _flatten(v, out, depth + 1)
    else:
        out.append(data)


def _json_tensor(data: Any, dtype: np.dtype[Any], shape: tuple[int, ...], where: str) -> np.ndarray:
    flat: list[Any] = []
    try:
        _flatten(data, flat)
    except ValueError as exc:
        raise V2Error(400, f"{where}: 'data': {exc}") from None
    count = math.prod(shape)
    if len(flat) != count:
        raise V2Error(400, f"{where}: 'data' has {len(flat)} elements, shape {list(shape)} needs {count}")
    kind = dtype.kind
    for v in flat:  # JSON types must match the datatype: no silent bool->float or float->int conversion
        ok = (type(v) is bool if kind == "b" else
              (type(v) is int) if kind in "iu" else
              (type(v) in (int, float)))
        if not ok:
            raise V2Error(400, f"{where}: 'data' holds {json.dumps(v)[:40]}, not a {datatype_of(dtype)} value")
    try:
        return np.array(flat, dtype=dtype).reshape(shape)
    except (OverflowError, ValueError) as exc:
        raise V2Error(400, f"{where}: 'data' does not fit {datatype_of(dtype)}: {exc}") from None


def _parameters(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise V2Error(400, f"{where}: 'parameters' must be an object")
    return params


@dataclass
class InferRequest:
    id: str | None
    inputs: list[np.ndarray]  # in the model's input order
    outputs: list[tuple[int, bool]]  # (output index, as binary data), in the requested order


def parse_infer(model: ModelMeta, body: bytes, header_length: int | None) -> InferRequest:
    """The inputs of an infer request, checked against `model`'s contract (V2Error 400 on any defect)."""
    if header_length is not None:
        if header_length < 0 or header_length > len(body):
            raise V2Error(400, f"Inference-Header-Content-Length {header_length} is outside the body "
                               f"({len(body)} bytes)")
        head, binary = body[:header_length], memoryview(body)[header_length:]
    else:
        head, binary = body, memoryview(b"")
    try:
        req = json.loads(head)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise V2Error(400, f"the request is not valid JSON: {exc}") from None
    if not isinstance(req, dict):
        raise V2Error(400, "the request must be a JSON object")
    rid = req.get("id")
    if rid is not None and not isinstance(rid, str):
        raise V2Error(400, "'id' must be a string")
    params = _parameters(req, "request")
    if params.get("sequence_id") not in (None, 0, ""):
        raise V2Error(400, "sequence requests (sequence_id) are not supported by this server")
    binary_default = params.get("binary_data_output", False) is True
    raw_inputs = req.get("inputs")
    if not isinstance(raw_inputs, list):
        raise V2Error(400, "'inputs' must be a list")
    by_name = {t.name: i for i, t in enumerate(model.inputs)}
    arrays: list[np.ndarray | None] = [None] * len(model.inputs)
    offset = 0
    for k, raw in enumerate(raw_inputs):
        where = f"input {k}"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise V2Error(400, f"{where}: must be an object with a 'name'")
        name = raw["name"]
        where = f"input '{name}'"
        if name not in by_name:
            raise V2Error(400, f"{where}: model '{model.name}' has no such input; it takes "
                               f"{', '.join(by_name) or 'none'}")
        idx = by_name[name]
        if arrays[idx] is not None:
            raise V2Error(400, f"{where}: given twice")
        meta = model.inputs[idx]
        datatype = raw.get("datatype")
        if not isinstance(datatype, str):
            raise V2Error(400, f"{where}: 'datatype' must be a string")
        if meta.datatype is not None and datatype != meta.datatype:
            raise V2Error(400, f"{where}: datatype {datatype}, the model takes {meta.datatype}")
        dtype = DATATYPES.get(datatype)
        if dtype is None:
            raise V2Error(400, f"{where}: datatype {datatype} is not supported by this server "
                               f"(use one of {', '.join(DATATYPES)})")
        shape = _shape_of(raw.get("shape"), where)
        why = _dims_ok(shape, meta)
        if why is not None:
            raise V2Error(400, f"{where}: shape {list(shape)} is outside the contract: {why}")
        iparams = _parameters(raw, where)
        size = iparams.get("binary_data_size")
        if size is not None:
            if "data" in raw:
                raise V2Error(400, f"{where}: both 'data' and binary_data_size")
            if type(size) is not int or size < 0:
                raise V2Error(400, f"{where}: binary_data_size must be a non-negative integer")
            need = math.prod(shape) * dtype.itemsize
            if size != need:
                raise V2Error(400, f"{where}: binary_data_size {size}, shape {list(shape)} of {datatype} "
                                   f"needs {need} bytes")
            if offset + size > len(binary):
                raise V2Error(400, f"{where}: binary data ends at byte {offset + size}, the body has "
                                   f"{len(binary)} after the JSON header")
            arr = np.frombuffer(binary[offset:offset + size], dtype=dtype).reshape(shape)
            offset += size
        else:
            if "data" not in raw:
                raise V2Error(400, f"{where}: no 'data' and no binary_data_size")
            arr = _json_tensor(raw["data"], dtype, shape, where)
        arrays[idx] = arr.astype(dtype.newbyteorder("="), copy=False)
    if offset != len(binary):
        raise V2Error(400, f"{len(binary) - offset} bytes of binary data after the inputs belong to no input")
    missing = [model.inputs[i].name for i, a in enumerate(arrays) if a is None]
    if missing:
        raise V2Error(400, f"missing input(s) {', '.join(missing)} of model '{model.name}'")
    out_names = {t.name: i for i, t in enumerate(model.outputs)}
    outputs: list[tuple[int, bool]] = []
    raw_outputs = req.get("outputs")
    if raw_outputs is None:
        outputs = [(i, binary_default) for i in range(len(model.outputs))]
    else:
        if not isinstance(raw_outputs, list):
            raise V2Error(400, "'outputs' must be a list")
        for raw in raw_outputs:
            if not isinstance(raw, dict) or raw.get("name") not in out_names:
                name = raw.get("name") if isinstance(raw, dict) else raw
                raise V2Error(400, f"requested output {json.dumps(name)[:80]}: model '{model.name}' has outputs "
                                   f"{', '.join(out_names)}")
            oparams = _parameters(raw, f"output '{raw['name']}'")
            if oparams.get("classification"):
                raise V2Error(400, "the classification extension is not supported by this server")
            outputs.append((out_names[raw["name"]], oparams.get("binary_data", binary_default) is True))
    return InferRequest(rid, [a for a in arrays if a is not None], outputs)


def encode_infer(model: ModelMeta, req: InferRequest, results: Sequence[np.ndarray]) -> Response:
    outs = []
    blobs: list[bytes] = []
    for idx, as_binary in req.outputs:
        arr = np.asarray(results[idx])
        entry: dict[str, Any] = {"name": model.outputs[idx].name, "datatype": datatype_of(arr.dtype),
                                 "shape": list(arr.shape)}
        if as_binary:
            raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = arr.ravel().tolist()
        outs.append(entry)
    head: dict[str, Any] = {"model_name": model.name, "model_version": model.versions[0], "outputs": outs}
    if req.id is not None:
        head["id"] = req.id
    text = json.dumps(head, separators=(",", ":")).encode()
    if not blobs:
        return Response(200, text, [(b"content-type", b"application/json")])
    return Response(200, text + b"".join(blobs), [(b"content-type", b"application/octet-stream"),
                                                  (HEADER_LENGTH.encode(), str(len(text)).encode())])


# ---------------------------------------------------------------------------------------------- routing

def _model_route(backend: Backend, parts: list[str]) -> tuple[ModelMeta, list[str]]:
    """/v2/models/{name}[/versions/{v}]/rest... -> (model, rest)."""
    if len(parts) < 3 or not parts[2]:
        raise V2Error(404, "no model named in the path")
    name = parts[2]
    model = backend.models.get(name)
    if model is None:
        raise V2Error(404, f"unknown model '{name}'; this server has {', '.join(sorted(backend.models))}")
    rest = parts[3:]
    if len(rest) >= 2 and rest[0] == "versions":
        if rest[1] not in model.versions:
            raise V2Error(404, f"model '{name}' has no version '{rest[1]}'; it has {', '.join(model.versions)}")
        rest = rest[2:]
    return model, rest


async def handle(backend: Backend, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
    """One request -> its response; every failure becomes a v2 error response."""
    try:
        return await _handle(backend, method, path, headers, body)
    except V2Error as exc:
        return error_response(exc.status, exc.message)
    except Exception as exc:  # a bug or a program failure: an error response, never a dead replica
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def _want(method: str, allowed: str) -> None:
    if method != allowed and not (allowed == "GET" and method == "HEAD"):
        raise V2Error(405, f"{method} is not allowed here; use {allowed}")


async def _handle(backend: Backend, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
    from toolchain import __version__

    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] != "v2":
        raise V2Error(404, f"no route {path}; the v2 protocol lives under /v2")
    if parts == ["v2"]:
        _want(method, "GET")
        return json_response(200, {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)})
    if parts[1] == "health" and len(parts) == 3 and parts[2] in ("live", "ready"):
        _want(method, "GET")
        ok = parts[2] == "live" or backend.ready()
        return json_response(200 if ok else 503, {"ready": ok} if parts[2] == "ready" else {"live": True})
    if parts[1:] == ["repository", "index"]:
        _want(method, "POST")
        state = "READY" if backend.ready() else "UNAVAILABLE"
        return json_response(200, [{"name": m.name, "version": v, "state": state}
                                   for m in backend.models.values() for v in m.versions])
    if parts[1] != "models":
        raise V2Error(404, f"no route {path}")
    model, rest = _model_route(backend, parts)
    if not rest:
        _want(method, "GET")
        return json_response(200, model.metadata())
    if rest == ["ready"]:
        _want(method, "GET")
        return json_response(200 if backend.ready() else 503, {"name": model.name, "ready": backend.ready()})
    if rest == ["config"]:
        _want(method, "GET")
        return json_response(200, model.config(backend.max_batch))
    if rest == ["infer"]:
        _want(method, "POST")
        if not backend.ready():
            raise V2Error(503, f"model '{model.name}' is not ready")
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise V2Error(400, f"Content-Encoding {encoding} is not supported; send the body uncompressed")
        raw_len = headers.get(HEADER_LENGTH)
        header_length = None
        if raw_len is not None:
            try:
                header_length = int(raw_len)
            except ValueError:
                raise V2Error(400, f"Inference-Header-Content-Length {raw_len[:40]!r} is not an integer") from None
        req = parse_infer(model, body, header_length)
        results = await backend.infer(model, req.inputs)
        return encode_infer(model, req, results)
    raise V2Error(404, f"no route {path}")


# ---------------------------------------------------------------------------------------------- ASGI

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class V2App:
    """The ASGI application. Bodies above `max_body_bytes` are refused with 413 before they are read
    whole (by Content-Length when given, else while streaming)."""

    def __init__(self, backend: Backend, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.backend = backend
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        try:
            resp = await self._http(scope, receive)
        except Exception as exc:  # the client went away mid-body, or a bug: answer if we still can
            resp = error_response(500, f"internal error: {type(exc).__name__}: {exc}")
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [*resp.headers, (b"content-length", str(len(resp.body)).encode())]})
        await send({"type": "http.response.body", "body": resp.body if scope.get("method") != "HEAD" else b""})

    async def _http(self, scope: dict[str, Any], receive: Receive) -> Response:
        headers: dict[str, str] = {}
        for k, v in scope.get("headers", []):
            headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                return error_response(400, f"Content-Length {declared[:40]!r} is not a number")
            if int(declared) > self.max_body_bytes:
                return error_response(413, f"the body is {int(declared)} bytes, this server takes at most "
                                           f"{self.max_body_bytes}")
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return error_response(400, "the client disconnected")
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return error_response(413, f"the body is over {self.max_body_bytes} bytes, this server's limit")
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        path = scope.get("path", "/")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        return await handle(self.backend, scope.get("method", "GET"), path, headers, b"".join(chunks))
