#!/usr/bin/env python3
"""Checks the machine code of the compiled CUDA kernels without a GPU (a ctest test).

Usage: check_cuda_kernels.py CUOBJDUMP OBJECT...

For each object of a Hopper kernel translation unit (objects named cuda_kernel_*.cu.o; others
are ignored), with cuobjdump from .deps/bin:
  - every function uses no local memory (LOCAL:0: no register spills, no stack arrays) and at
    most 255 registers (--dump-resource-usage);
  - the SASS issues the Hopper instructions the kernel is written for: HGMMA (wgmma), UTMALDG
    (TMA loads) and UTMASTG (TMA stores).
Prints one line per object; exits 1 when any check fails, 2 on bad usage.
"""
import re
import subprocess
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cuobjdump, objects = argv[0], [o for o in argv[1:] if re.search(r"cuda_kernel_\w+\.cu\.o$", o)]
    if not objects:
        print("check_cuda_kernels: no cuda_kernel_*.cu.o among the objects", file=sys.stderr)
        return 1
    failures = []
    for obj in objects:
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", obj], check=True,
                               capture_output=True, text=True).stdout
        functions = re.findall(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)",
                               usage)
        sass = subprocess.run([cuobjdump, "-sass", obj], check=True, capture_output=True,
                              text=True).stdout
        counts = {op: len(re.findall(r"\b" + op + r"[.\s]", sass))
                  for op in ("HGMMA", "UTMALDG", "UTMASTG")}
        worst_reg = max((int(r) for _, r, _, _ in functions), default=0)
        local = sum(int(l) + int(s) for _, _, s, l in functions)
        name = obj.rsplit("/", 1)[-1]
        print(f"{name}: {len(functions)} functions, max {worst_reg} registers, "
              f"{local} bytes of stack + local memory, " +
              ", ".join(f"{op} x{n}" for op, n in counts.items()))
        if not functions:
            failures.append(f"{name}: no functions in the resource usage")
        if local != 0:
            failures.append(f"{name}: {local} bytes of stack or local memory (spills)")
        if worst_reg > 255:
            failures.append(f"{name}: {worst_reg} registers")
        for op, n in counts.items():
            if n == 0:
                failures.append(f"{name}: no {op} in the SASS")
    for failure in failures:
        print("FAILED: " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
