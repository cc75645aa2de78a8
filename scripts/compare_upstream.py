#!/usr/bin/env python3
# Compares the outputs `tokamax verify --impl cpu --dump-dir DIR` wrote for top_k and router_topk
# with upstream Tokamax's own reference functions, bit for bit (NaN weights equal), and prints how
# many cases agree. Not part of CI (it needs JAX and the upstream wheel); docs/ops/top_k.md says
# how to run it:
#   python3 scripts/compare_upstream.py WHEEL_DIR DUMP_DIR
# WHEEL_DIR is the unpacked tokamax wheel (holding tokamax/); the reference modules are loaded by
# path, so only jax, numpy and ml_dtypes are needed, not the upstream package's dependencies.
import importlib.util
import json
import os
import sys

import jax.numpy as jnp
import ml_dtypes  # noqa: F401 (registers bfloat16 with numpy, for the dumped bf16 scores)
import numpy as np

WHEEL = sys.argv[1]
DUMP = sys.argv[2]

def load(rel):
    spec = importlib.util.spec_from_file_location(rel, os.path.join(WHEEL, rel))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

topk = load('tokamax/_src/ops/topk/reference.py')
router = load('tokamax/_src/ops/router_topk/reference.py')

def npy(path):
    return np.load(path, allow_pickle=False)

cases = agreed = 0
for op in ('top_k', 'router_topk'):
    root = os.path.join(DUMP, op)
    if not os.path.isdir(root):
        continue
    for spec in sorted(os.listdir(root)):
        d = os.path.join(root, spec)
        args = json.load(open(os.path.join(d, 'case.json')))['args']
        scores_path = os.path.join(d, 'inputs', 'scores.npy')
        scores = npy(scores_path)
        if scores.size == 0:
            continue
        out = os.path.join(d, 'cpu')
        cases += 1
        if op == 'top_k':
            lengths = None
            lp = os.path.join(d, 'inputs', 'row_lengths.npy')
            if os.path.exists(lp):
                lengths = jnp.asarray(npy(lp))
            want = topk.topk(jnp.asarray(scores), args['k'], lengths, return_scores=True)
            ok = np.array_equal(np.asarray(want[0]), npy(os.path.join(out, 'indices.npy')))
            bp = os.path.join(out, 'scores_bits.npy')
            if os.path.exists(bp):
                ok = ok and np.array_equal(np.asarray(want[1]), npy(bp))
        else:
            s = jnp.asarray(scores).astype(jnp.float32)
            w, i = router.rowmax_topk(s, args['k'])
            ok = np.array_equal(np.asarray(i), npy(os.path.join(out, 'indices.npy')))
            ok = ok and np.array_equal(np.asarray(w), npy(os.path.join(out, 'weights.npy')), equal_nan=True)
        agreed += ok
        print(f'{op:12s} {spec:30s} {"agrees" if ok else "DIFFERS"}')
print(f'{agreed} of {cases} cases agree with upstream')
sys.exit(0 if agreed == cases else 1)
