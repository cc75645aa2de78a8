#!/usr/bin/env python3
"""Checks the machine code of the AMX tile kernels on any x86 machine (a ctest test).

Usage: check_amx_kernels.py OBJDUMP OBJECT...

The tile kernels run on the hardware only on CPUs with AMX, and elsewhere the tests run their
portable emulation, which shares the kernels' source but not their instructions. This reads
what the compiler and assembler made of the hardware build (objects named amx_kernel.cc.o and
peaks.cc.o; others are ignored):
  - the GEMM engine's block product configures the tiles, loads operands and accumulators,
    issues TDPBF16PS on all four accumulators of its 32 x 32 block (tmm0-3) from the two A
    (tmm4-5) and two B (tmm6-7) tiles, stores and releases them;
  - the peak measurement issues TDPBF16PS and TDPBUSD chains.
Prints one line per object; exits 1 when a check fails, 2 on bad usage.
"""
import re
import subprocess
import sys

REQUIRED = {
    "amx_kernel.cc.o": [
        "ldtilecfg", "tileloadd", "tilestored", "tilezero", "tilerelease",
        "tdpbf16ps %tmm6,%tmm4,%tmm0", "tdpbf16ps %tmm7,%tmm4,%tmm1",
        "tdpbf16ps %tmm6,%tmm5,%tmm2", "tdpbf16ps %tmm7,%tmm5,%tmm3",
    ],
    "peaks.cc.o": ["ldtilecfg", "tdpbf16ps", "tdpbusd", "tilerelease"],
}


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    objdump, objects = argv[0], argv[1:]
    failures = []
    for suffix, needed in REQUIRED.items():
        matches = [o for o in objects if o.endswith("/" + suffix)]
        if len(matches) != 1:
            failures.append(f"{suffix}: expected one such object, found {len(matches)}")
            continue
        text = subprocess.run([objdump, "-d", "--no-show-raw-insn", matches[0]], check=True,
                              capture_output=True, text=True).stdout
        # GNU objdump prints "%tmm6,%tmm4,%tmm0", llvm-objdump (clang builds) "%tmm6, %tmm4, %tmm0".
        text = re.sub(r",[ \t]+", ",", re.sub(r"[ \t]+", " ", text))
        missing = [insn for insn in needed if insn not in text]
        count = len(re.findall(r"\b(tdp\w+|tileloadd|tilestored)\b", text))
        print(f"{suffix}: {count} tile loads, stores and products; "
              f"{'missing ' + ', '.join(missing) if missing else 'every required instruction'}")
        if missing:
            failures.append(f"{suffix}: missing {', '.join(missing)}")
    for failure in failures:
        print("FAILED: " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
