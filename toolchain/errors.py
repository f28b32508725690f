"""One exception hierarchy for the toolchain; one exit code per class."""

from __future__ import annotations


class ToolchainError(Exception):
    """Base of every error the toolchain reports to its users (never a traceback)."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix: str | None = fix

    def __str__(self) -> str:
        base = super().__str__()
        if self.fix:
            return f"{base}\n  fix: {self.fix}"
        return base


class SpecError(ToolchainError):
    """The spec (toolchain/spec/*.toml) is malformed."""

    exit_code = 3
