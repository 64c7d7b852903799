"""How every benchmark hands over its report: printed, and with --markdown FILE also written
there (the text bench/RESULTS.md quotes)."""

from __future__ import annotations

from pathlib import Path


def publish(text: str, markdown: str | None) -> None:
    print(text)
    if markdown:
        Path(markdown).write_text(text)
