#!/usr/bin/env python3
"""Unpacks pinned wheels into .deps/ (git-ignored): what a pin list (scripts/*_deps.txt) names,
downloaded by pip with their hashes checked, and only the files the build and the baselines use.

Usage: install_wheels.py PINS

  scripts/cuda_deps.txt  CUTLASS and cudnn-frontend headers, cuobjdump / nvdisasm (with nvcc)
  scripts/mkl_deps.txt   oneMKL's runtime libraries (the `mkl` baselines load them with dlopen)

Run by scripts/install_deps.sh; does nothing when .deps/ already holds this exact pin list (a
stamp per list). Nothing is downloaded at build time."""
import hashlib
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPS = ROOT / ".deps"

# What to take from each wheel: (prefix inside the wheel, folder under .deps/, the file names
# to keep as a regular expression or None for all).
LAYOUT = {
    "nvidia_cutlass": [("cutlass_library/source/include/", "cutlass/include/", None),
                       ("cutlass_library/source/tools/util/include/",
                        "cutlass/tools/util/include/", None)],
    "nvidia_cudnn_frontend": [("include/", "cudnn_frontend/include/", None)],
    "nvidia_cuda_cuobjdump": [("nvidia/cu13/bin/", "bin/", None)],
    "nvidia_cuda_nvdisasm": [("nvidia/cu13/bin/", "bin/", None)],
    # The single dynamic library and what it loads for BLAS with GNU OpenMP or no threads: the
    # LP64 interfaces, the core, and the per-ISA kernels (not MPI, ScaLAPACK, VML or Intel/TBB
    # threading).
    "mkl": [(re.compile(r"mkl-[^/]+\.data/data/lib/"), "mkl/lib/",
             r"libmkl_(rt|core|gnu_thread|sequential|intel_lp64|gf_lp64|def|mc3|avx2|avx512|"
             r"avx10)\.so\.\d+")],
}
# Folders each pin list owns under .deps/ (emptied before it is unpacked again).
OWNED = {"cuda_deps": ["cutlass", "cudnn_frontend", "bin"], "mkl_deps": ["mkl"]}


def strip_prefix(member, prefix):
    """The member's path below `prefix` (a string or a compiled pattern), or None."""
    if isinstance(prefix, str):
        return member[len(prefix):] if member.startswith(prefix) else None
    match = prefix.match(member)
    return member[match.end():] if match else None


def main(argv) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    pins_path = pathlib.Path(argv[0]).resolve()
    pins = pins_path.read_bytes()
    stamp = DEPS / (pins_path.stem + ".stamp")
    digest = hashlib.sha256(pins).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == digest:
        return 0
    with tempfile.TemporaryDirectory() as wheels:
        # Exact files whatever the local Python: these wheels are the same for every version.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
             "--platform", "manylinux2014_x86_64", "--require-hashes", "-r", str(pins_path),
             "-d", wheels],
            check=True)
        for stale in OWNED.get(pins_path.stem, []):
            shutil.rmtree(DEPS / stale, ignore_errors=True)
        for wheel in sorted(pathlib.Path(wheels).glob("*.whl")):
            name = wheel.name.split("-")[0]
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    for prefix, target, keep in LAYOUT.get(name, []):
                        rest = strip_prefix(member, prefix)
                        if not rest or member.endswith("/"):
                            continue
                        if keep is not None and not re.fullmatch(keep, rest):
                            continue
                        out = DEPS / target / rest
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_bytes(archive.read(member))
                        if target == "bin/":
                            out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    stamp.write_text(digest + "\n")
    print(f"install_wheels: {pins_path.name} unpacked into {DEPS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
