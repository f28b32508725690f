"""aoti-toolchain: build, check, repair and run PyTorch AOTInductor plugins without LibTorch."""

from __future__ import annotations

__version__ = "0.1.0"
