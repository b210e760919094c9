"""The committed generated code is exactly what the installed grpcio-tools makes from proto/."""

from __future__ import annotations

import pytest

from rlhw.env import codegen


@pytest.mark.timeout(60)
def test_committed_generated_code_matches_a_fresh_protoc_run(tmp_path):
    written = codegen.generate(out_dir=tmp_path)
    assert [p.name for p in written] == ["env_pb2.py", "env_pb2.pyi", "env_pb2_grpc.py"]
    stale = []
    for rel in codegen.GENERATED:
        fresh = (tmp_path / rel).read_text()
        committed = (codegen.REPO_ROOT / rel).read_text()
        if fresh != committed:
            stale.append(rel)
    assert not stale, f"stale generated code {stale}: run `python -m rlhw.env.codegen` and commit the result"


def test_generated_code_imports_from_the_package_path():
    text = (codegen.REPO_ROOT / "rlhw/env/v1/env_pb2_grpc.py").read_text()
    assert "from rlhw.env.v1 import env_pb2" in text
