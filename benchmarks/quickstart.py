"""The README quick start's manifest as the README writes it: one source for the
benchmarks that build it."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def manifest() -> str:
    m = re.search(r"<!-- quickstart: manifest -->\s*```toml\n(.*?)```", README.read_text(), re.S)
    if m is None:
        raise SystemExit(f"{README} has no block marked <!-- quickstart: manifest -->")
    return m.group(1)
