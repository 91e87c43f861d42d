"""Shared fixtures: the real data in ../shared/data, read in place (never copied into the repo)."""

import gzip
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MULTI30K = DATA / "multi30k"


def head_gz(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="session")
def multi30k_small(tmp_path_factory) -> dict[str, Path]:
    """The first 400 train and 60 val pairs of Multi30K en-de as plain files in a temp dir."""
    if not MULTI30K.is_dir():
        pytest.skip(f"{MULTI30K} not found")
    out = tmp_path_factory.mktemp("m30k")
    files = {}
    for split, n in (("train", 400), ("val", 60)):
        for lang in ("en", "de"):
            p = out / f"{split}.{lang}"
            p.write_text("\n".join(head_gz(MULTI30K / f"{split}.{lang}.gz", n)) + "\n", encoding="utf-8")
            files[f"{split}.{lang}"] = p
    return files
