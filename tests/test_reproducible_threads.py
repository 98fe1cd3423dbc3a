"""A bundle's bytes do not depend on how many threads torch runs: the same
`--no-bench` build with torch on one thread and on two writes the same file
(through a local Dask cluster, validation in its workers' threads, too:
tests/test_distributed.py's byte-identical build).

Validation's float reductions (the drawn inputs' statistics, the float64
reference, the error scale) add in an order that depends on torch's thread
count when torch splits them; the recorded figures are part of `bundle.json`.
The manifest's shapes are large enough (430080 elements) for torch to split
its reductions over two threads, so the test fails where validation does not
pin the count (`stages.validate.one_torch_thread`)."""

from __future__ import annotations

import hashlib

import pytest
from helpers import boo

pytestmark = pytest.mark.build  # builds twice

MANIFEST = """
[bundle]
name = "repro"
version = "0.1.0"
targets = ["cpu"]

[[kernels]]
op = "layer_norm"
input_shape = [10, 32, 42, 32]
dtype = "float32"
affine = true
bias = true
masks = [1, 14]
impls = ["manual"]
"""


def test_bundle_bytes_do_not_depend_on_torch_threads(tmp_path):
    (tmp_path / "m.toml").write_text(MANIFEST)
    runs = {
        "1 thread": (("-j", "1"), {"OMP_NUM_THREADS": "1"}),
        "2 threads": (("-j", "1"), {"OMP_NUM_THREADS": "2"}),
    }
    digests = {}
    for name, (args, env) in runs.items():
        out = tmp_path / name.replace(" ", "-")
        boo("build", "m.toml", "--no-bench", "-q", "--out", str(out), *args, cwd=tmp_path, extra_env=env)
        digests[name] = hashlib.sha256((out / "repro-0.1.0.tar.zst").read_bytes()).hexdigest()
    assert len(set(digests.values())) == 1, digests
