"""Regenerate the Python code for proto/rlhw/env/v1/env.proto (committed under rlhw/env/v1/).

Run ``python -m rlhw.env.codegen`` after editing the proto. The generated files carry the protoc
version of the installed grpcio-tools in their header, so the staleness test compares against a
fresh run of the same generator rather than against a checked-in hash.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "proto"
PROTO_FILES = ("rlhw/env/v1/env.proto",)
#: Files protoc writes for each proto, relative to the output root.
GENERATED = ("rlhw/env/v1/env_pb2.py", "rlhw/env/v1/env_pb2.pyi", "rlhw/env/v1/env_pb2_grpc.py")


def generate(out_dir: Path | str = REPO_ROOT, proto_root: Path | str = PROTO_ROOT) -> list[Path]:
    """Run protoc (from grpcio-tools) into ``out_dir``; returns the paths written."""
    try:
        import importlib.resources

        from grpc_tools import protoc
    except ImportError as e:  # pragma: no cover - grpcio-tools is a dev dependency
        raise SystemExit("grpcio-tools is needed to regenerate the proto code: pip install grpcio-tools") from e
    out_dir = Path(out_dir)
    proto_root = Path(proto_root)
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *PROTO_FILES,
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
    return [out_dir / g for g in GENERATED]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO_ROOT), help="output root (default: the repository)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
