"""Device names as users spell them: "cpu", "cuda" (cuda:0) or "cuda:N", N a device index in decimal without
a sign, spaces or leading zeros (torch.device's spelling). The same rules as the C runtime's
(runtime/include/aoti_host/device_name.h), checked here first so a bad name is refused before anything is
loaded, in the same words. Whether cuda:N exists on this host is the runtime's to say when it loads (it
names how many devices the process sees); a Ray replica sees its one GPU as cuda:0 (toolchain/serve)."""

from __future__ import annotations

from dataclasses import dataclass

from toolchain.errors import InputError

_MAX_INDEX = 2**31 - 1
_FIX = "use cpu, cuda (cuda:0) or cuda:N with N a device index (0, 1, ...)"


@dataclass(frozen=True)
class Device:
    """A parsed device: `index` None for the CPU, else the CUDA device index."""

    index: int | None

    @property
    def cuda(self) -> bool:
        return self.index is not None

    @property
    def name(self) -> str:
        """The canonical spelling: "cpu" or "cuda:N"."""
        return "cpu" if self.index is None else f"cuda:{self.index}"


def parse_device(text: object) -> Device:
    """The device `text` names; InputError (what is wrong, and the fix) for anything else."""
    if not isinstance(text, str):
        msg = f"device={text!r}: give the device as a string"
        raise InputError(msg, fix=f"{_FIX}; e.g. device=str(torch_device)")
    if text == "cpu":
        return Device(None)
    if text == "cuda":
        return Device(0)
    quoted = f'device "{text}"'
    if not text.startswith("cuda:"):
        raise InputError(f"{quoted}: not a device", fix=_FIX)
    digits = text[5:]
    if not digits:
        raise InputError(f"{quoted}: no index after the colon", fix=_FIX)
    if not (digits.isascii() and digits.isdigit()):
        raise InputError(f'{quoted}: the index "{digits}" is not a non-negative decimal integer', fix=_FIX)
    if len(digits) > 1 and digits[0] == "0":
        raise InputError(f"{quoted}: the index has a leading zero", fix=_FIX)
    index = int(digits)
    if index > _MAX_INDEX:
        msg = f"{quoted}: the index {digits} is out of range (a host has a few devices: cuda:0, cuda:1, ...)"
        raise InputError(msg, fix=_FIX)
    return Device(index)
