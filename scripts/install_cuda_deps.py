#!/usr/bin/env python3
"""Unpacks the pinned CUDA wheels (scripts/cuda_deps.txt) into .deps/: CUTLASS and cudnn-frontend
headers, and cuobjdump / nvdisasm. Run by scripts/install_deps.sh when nvcc is installed; does
nothing when .deps/ already holds this exact pin list."""
import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PINS = ROOT / "scripts" / "cuda_deps.txt"
DEPS = ROOT / ".deps"
STAMP = DEPS / "cuda_deps.stamp"

# What to take from each wheel: (prefix inside the wheel, folder under .deps/).
LAYOUT = {
    "nvidia_cutlass": [("cutlass_library/source/include/", "cutlass/include/"),
                       ("cutlass_library/source/tools/util/include/", "cutlass/tools/util/include/")],
    "nvidia_cudnn_frontend": [("include/", "cudnn_frontend/include/")],
    "nvidia_cuda_cuobjdump": [("nvidia/cu13/bin/", "bin/")],
    "nvidia_cuda_nvdisasm": [("nvidia/cu13/bin/", "bin/")],
}


def main() -> int:
    pins = PINS.read_bytes()
    digest = hashlib.sha256(pins).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == digest:
        return 0
    with tempfile.TemporaryDirectory() as wheels:
        # Exact files whatever the local Python: the headers are the same in every wheel.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
             "--platform", "manylinux2014_x86_64", "--require-hashes", "-r", str(PINS),
             "-d", wheels],
            check=True)
        for stale in ("cutlass", "cudnn_frontend", "bin"):
            shutil.rmtree(DEPS / stale, ignore_errors=True)
        for wheel in sorted(pathlib.Path(wheels).glob("*.whl")):
            name = wheel.name.split("-")[0]
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    for prefix, target in LAYOUT.get(name, []):
                        if not member.startswith(prefix) or member.endswith("/"):
                            continue
                        out = DEPS / target / member[len(prefix):]
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_bytes(archive.read(member))
                        if target == "bin/":
                            out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    STAMP.write_text(digest + "\n")
    print(f"install_cuda_deps: unpacked into {DEPS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
