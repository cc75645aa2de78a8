#!/usr/bin/env python3
# Compares the outputs `tokamax verify --impl cpu --dump-dir DIR` wrote for top_k, router_topk,
# ragged_gather, ragged_gather_reduce, fused_moe, triangle_multiplication and its VJP, and
# dot_product_attention's upstream mask forms (CausalMask, normalize_output, dropout),
# ragged_paged_attention, splash_attention and its VJP, kimi_delta_attention and its VJP (jax.vjp
# of upstream's reference), and gated_delta_rule (every output, normwise; gated_delta_rule's conv
# state bit for bit) with upstream Tokamax's own reference functions and prints how many cases agree: bit for bit (NaN weights equal), except
# ragged_gather_reduce, whose f32 sums upstream leaves to XLA's order and rounding (it agrees when
# the two differ by no more than twice the error bound verify applies to each), ragged_gather,
# compared on rows [start, end) only, and fused_moe (silu layers: upstream's reference has no
# other act_fn) and triangle_multiplication (its base.py _fwd, which needs the installed
# package; the VJP is jax.vjp of that layer), compared normwise (MOE_TOLERANCE). Not part of CI (it needs JAX and the upstream
# wheel); docs/ops/top_k.md says
# how to run it:
#   python3 scripts/compare_upstream.py WHEEL_DIR DUMP_DIR
# WHEEL_DIR is the unpacked tokamax wheel (holding tokamax/); the reference modules are loaded by
# path, so only jax, numpy and ml_dtypes are needed, not the upstream package's dependencies.
import ast
import importlib.util
import json
import os
import sys

import jax
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

def load_function(rel, name):
    # One function of a module whose imports need the whole package (ragged_gather's base.py):
    # its source alone, run with jax in scope.
    tree = ast.parse(open(os.path.join(WHEEL, rel)).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope = {'jax': jax}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), rel, 'exec'), scope)
    return scope[name]

topk = load('tokamax/_src/ops/topk/reference.py')
router = load('tokamax/_src/ops/router_topk/reference.py')
gather = load_function('tokamax/_src/ops/ragged_gather/base.py', 'ragged_gather')
gather_reduce = load('tokamax/_src/ops/ragged_gather_reduce/reference.py')
fused_moe = load('tokamax/_src/ops/experimental/fused_moe/reference.py')
rpa = load('tokamax/_src/ops/batched_rpa/reference.py')

# fused_moe: two f32 computations of a two-layer network in different orders (XLA's, ours), each
# rounded to the output dtype; they agree when their normwise difference, relative to the
# float64 oracle's norm, is within a few units of the output dtype (a wrongly routed token moves
# its row by O(1)).
MOE_TOLERANCE = {np.dtype(np.float32): 2.0**-18, np.dtype(np.float16): 2.0**-9}

def within_bound(want, got, x, indices, weights, valid, g):
    # Upstream and we each round an f32 sum of g products (in orders of our own) to the output
    # dtype: each is within verify's bound of the exact sum, (g + 1) 2^-24 sum|terms| + u |sum|,
    # so the two may differ by twice that, and no more.
    rows = np.where(valid, indices, 0)
    terms = x[rows].astype(np.float64) * weights.astype(np.float64)[:, None]
    terms = np.where(valid[:, None], terms, 0.0).reshape(-1, g, x.shape[1])
    exact, magnitude = terms.sum(axis=1), np.abs(terms).sum(axis=1)
    u = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11}.get(got.dtype, 2.0**-8)
    bound = (g + 1) * 2.0**-24 * magnitude + u * np.abs(exact)
    return bool(np.all(np.abs(want.astype(np.float64) - got.astype(np.float64)) <= 2 * bound))

def npy(path):
    return np.load(path, allow_pickle=False)

cases = agreed = 0

DTYPES = {'f32': np.float32, 'bf16': ml_dtypes.bfloat16, 'f16': np.float16,
          'f8e4m3': ml_dtypes.float8_e4m3fn, 'i8': np.int8, 'i32': np.int32, 'bool': np.bool_}

def inputs(d, args):
    # The dump widens bf16, f16 and f8 to f32 .npy files: back to each argument's dtype.
    root = os.path.join(d, 'inputs')
    out = {}
    for f in os.listdir(root):
        name = f[:-4]
        value = npy(os.path.join(root, f))
        spec = args.get(name)
        if isinstance(spec, str) and '[' in spec:
            value = value.astype(DTYPES[spec.split('[')[0]])
        out[name] = value
    return out

def triangle_module():
    # triangle_multiplication's base.py calls upstream's layer_norm and gated_linear_unit ops:
    # it needs the installed package (pip install tokamax==0.0.17 with its dependencies).
    try:
        from tokamax._src.ops.triangle_multiplication import base as tri
        return tri
    except ImportError as e:
        print(f'triangle_multiplication skipped: upstream\'s package is not installed ({e})')
        return None

TRIANGLE_WEIGHTS = ('projection_in_weights', 'gate_in_weights', 'projection_out_weights',
                    'gate_out_weights', 'layernorm_in_scale', 'layernorm_in_offset',
                    'layernorm_out_scale', 'layernorm_out_offset')

def attention_module():
    # dot_product_attention's base.py (its XLA path) needs the installed package, as the
    # triangle op's does.
    try:
        from tokamax._src.ops.attention import base as attention
        return attention
    except ImportError as e:
        print(f'dot_product_attention skipped: upstream\'s package is not installed ({e})')
        return None

def splash_module():
    # splash attention's base.py and mask classes need the installed package, as the triangle
    # op's do.
    try:
        from tokamax._src.ops.experimental.tpu.splash_attention import base as splash
        from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_mask as masks
        return splash, masks
    except ImportError as e:
        print(f'splash_attention skipped: upstream\'s package is not installed ({e})')
        return None, None

def splash_mask(masks, m, shape):
    # The canonical catalog mask (ops/splash_attention/mask.h) as upstream's mask object.
    # Upstream's base.py turns a CausalMask into its plain causal Mask and drops the offset
    # (the mask class and the TPU kernel keep it; docs/ops/splash_attention.md): a causal mask
    # with an offset goes as its boolean array, which base.py takes as is.
    (kind, body), = m.items()
    if kind == 'full_mask':
        return masks.FullMask(shape)
    if kind == 'causal_mask':
        causal = masks.CausalMask(shape, offset=body['offset'])
        return causal if body['offset'] == 0 else masks.NumpyMask(np.asarray(causal[:, :]))
    if kind == 'local_mask':
        return masks.LocalMask(shape, window_size=tuple(body['window_size']), offset=body['offset'])
    if kind == 'chunked_causal_mask':
        return masks.ChunkedCausalMask(shape, chunk_size=body['chunk_size'])
    if kind == 'numpy_mask':
        rows = body.get('rows')
        array = (np.array([[c == '1' for c in r] for r in rows]) if rows is not None
                 else np.load(body['file']).astype(bool))
        return masks.NumpyMask(array)
    parts = [splash_mask(masks, p, shape) for p in body]
    out = parts[0]
    for p in parts[1:]:
        out = masks.LogicalAnd(out, p) if kind == 'logical_and' else masks.LogicalOr(out, p)
    return out

def splash_case(op, spec, d, args, x, out):
    # Upstream's SplashAttention / SplashAttentionVjp (base.py, its XLA reference) on the same
    # inputs; each output normwise against the oracle's norm. The VJP's residuals and out are
    # the case's inputs when given, else upstream's own forward.
    splash, masks = splash_module()
    if splash is None:
        return None
    q, k, v = (jnp.asarray(x[n]) for n in ('q', 'k', 'v'))
    kwargs = dict(mask=splash_mask(masks, args['mask'], (q.shape[1], k.shape[-2])),
                  is_mqa=args['is_mqa'], mask_value=args['mask_value'],
                  attn_logits_soft_cap=args['attn_logits_soft_cap'])
    if 'q_segment_ids' in x:
        kwargs['segment_ids'] = splash.SegmentIds(q=jnp.asarray(x['q_segment_ids']),
                                                  kv=jnp.asarray(x['kv_segment_ids']))
    if 'sinks' in x:
        kwargs['sinks'] = jnp.asarray(x['sinks'])
    if op == 'splash_attention':
        result = splash.SplashAttention()(q, k, v, return_residuals=args['return_residuals'],
                                          **kwargs)
        want = {'out': result}
        if args['return_residuals']:
            o, res = result
            want = {'out': o, 'max_logits': res[0], 'logsumexp': res[1]}
    else:
        o, res = splash.SplashAttention()(q, k, v, return_residuals=True, **kwargs)
        if 'out' in x:
            o = jnp.asarray(x['out'])
        if 'logsumexp' in x:
            res = (res[0], jnp.asarray(x['logsumexp']))
        grads = splash.SplashAttentionVjp()(res, o, jnp.asarray(x['dout']), q, k, v, **kwargs)
        want = {'d' + n: g for n, g in grads.items() if g is not None}
    ok, detail = True, []
    for name, w in want.items():
        w = np.asarray(w)
        # Ours in its output's dtype (dsinks: the sinks', where upstream's is f32).
        ours = np.dtype(DTYPES[args['sinks' if name == 'dsinks' else 'q'].split('[')[0]])
        if name in ('max_logits', 'logsumexp'):
            ours = np.dtype(np.float32)
        got = npy(os.path.join(out, name + '.npy')).astype(ours).astype(w.dtype)
        oracle_path = os.path.join(d, 'oracle', name + '.npy')
        oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
        tolerance = max(MOE_TOLERANCE.get(w.dtype, 2.0**-6), MOE_TOLERANCE.get(ours, 2.0**-6))
        apart = (np.linalg.norm(w.astype(np.float64) - got.astype(np.float64)) /
                 (np.linalg.norm(oracle) or 1.0))
        ok = ok and w.shape == got.shape and apart <= 4 * tolerance
        detail.append(f'{name} {apart / tolerance:.2f}')
    print(f'{op:12s} {spec:30s} normwise apart, units of the tolerance (4 allowed): '
          + ', '.join(detail))
    return ok

def kda_case(op, spec, d, args, x, out):
    # Upstream's kda/reference.py (its token-by-token recurrence) on the same inputs; each output
    # normwise against the oracle's norm.
    try:
        from tokamax._src.ops.kda import reference as kda
    except ImportError as e:
        print(f'kimi_delta_attention skipped: upstream\'s package is not installed ({e})')
        return None
    opt = lambda n: jnp.asarray(x[n]) if n in x else None
    o, final = kda.kimi_delta_attention(
        jnp.asarray(x['query']), jnp.asarray(x['key']), jnp.asarray(x['value']),
        jnp.asarray(x['gate']), jnp.asarray(x['beta']), a_log=opt('a_log'),
        delta_time_bias=opt('delta_time_bias'), scale=args['scale'],
        initial_state=opt('initial_state'), output_final_state=args['output_final_state'],
        use_qk_l2norm=args['use_qk_l2norm'], use_gate_in_kernel=args['use_gate_in_kernel'],
        segment_ids=opt('segment_ids'), lower_bound=args['lower_bound'],
        context_parallel_metadata=None, max_num_segments=args['max_num_segments'])
    want = {'out': o}
    if args['output_final_state']:
        want['final_state'] = final
    ok, detail = True, []
    for name, w in want.items():
        w = np.asarray(w)
        got = npy(os.path.join(out, name + '.npy')).astype(np.float64)
        oracle_path = os.path.join(d, 'oracle', name + '.npy')
        oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
        tolerance = MOE_TOLERANCE.get(w.dtype, 2.0**-6)
        apart = (np.linalg.norm(w.astype(np.float64) - got) / (np.linalg.norm(oracle) or 1.0))
        ok = ok and w.shape == got.shape and apart <= 4 * tolerance
        detail.append(f'{name} {apart / tolerance:.2f}')
    print(f'{op:12s} {spec:30s} normwise apart, units of the tolerance (4 allowed): '
          + ', '.join(detail))
    return ok

def kda_vjp_case(op, spec, d, args, x, out):
    # jax.vjp of upstream's kda/reference.py with respect to every differentiable input given,
    # at the cotangents dout (and dfinal_state, zeros when absent); each gradient normwise
    # against the oracle's norm.
    try:
        from tokamax._src.ops.kda import reference as kda
    except ImportError as e:
        print(f'kimi_delta_attention_vjp skipped: upstream\'s package is not installed ({e})')
        return None
    names = [n for n in ('query', 'key', 'value', 'gate', 'beta', 'a_log', 'delta_time_bias',
                         'initial_state') if n in x]
    def forward(*values):
        t = dict(zip(names, values))
        o, final = kda.kimi_delta_attention(
            t['query'], t['key'], t['value'], t['gate'], t['beta'], a_log=t.get('a_log'),
            delta_time_bias=t.get('delta_time_bias'), scale=args['scale'],
            initial_state=t.get('initial_state'), output_final_state=args['output_final_state'],
            use_qk_l2norm=args['use_qk_l2norm'], use_gate_in_kernel=args['use_gate_in_kernel'],
            segment_ids=jnp.asarray(x['segment_ids']) if 'segment_ids' in x else None,
            lower_bound=args['lower_bound'], context_parallel_metadata=None,
            max_num_segments=args['max_num_segments'])
        return (o, final) if args['output_final_state'] else o
    primals, pullback = jax.vjp(forward, *(jnp.asarray(x[n]) for n in names))
    if args['output_final_state']:
        dfinal = (jnp.asarray(x['dfinal_state']) if 'dfinal_state' in x
                  else jnp.zeros_like(primals[1]))
        cot = (jnp.asarray(x['dout']), dfinal)
    else:
        cot = jnp.asarray(x['dout'])
    grads = pullback(cot)
    ok, detail = True, []
    for name, w in zip(names, grads):
        w = np.asarray(w)
        got = npy(os.path.join(out, 'd' + name + '.npy')).astype(np.float64)
        oracle_path = os.path.join(d, 'oracle', 'd' + name + '.npy')
        oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
        tolerance = max(MOE_TOLERANCE.get(w.dtype, 2.0**-6),
                        MOE_TOLERANCE.get(np.dtype(DTYPES[args['query'].split('[')[0]]), 2.0**-6))
        apart = (np.linalg.norm(w.astype(np.float64) - got) / (np.linalg.norm(oracle) or 1.0))
        ok = ok and w.shape == got.shape and apart <= 4 * tolerance
        detail.append(f'd{name} {apart / tolerance:.2f}')
    print(f'{op:12s} {spec:30s} normwise apart, units of the tolerance (4 allowed): '
          + ', '.join(detail))
    return ok

gdn = load('tokamax/_src/ops/causal_conv1d_gated_delta_rule/reference.py')

def gdn_case(op, spec, d, args, x):
    # Upstream's causal_conv1d_gated_delta_rule/reference.py on the same inputs, against our cpu
    # and reference outputs: the conv state bit for bit, out and the recurrent state normwise
    # against the oracle's norm (upstream stores a bf16 state after every token; our cpu keeps
    # it in f32 until the request's last token).
    qkv = x['qkv']
    n_v, d_k, d_v = x['recurrent_state'].shape[1:]
    n_kq = (qkv.shape[1] - n_v * d_v) // (2 * d_k)
    i32 = lambda n: jnp.asarray(np.array(args[n], np.int32))
    (conv, state), o = gdn.run_jax_gdn_attention_local_ref(
        qkv=jnp.asarray(qkv), b=jnp.asarray(x['b']), a=jnp.asarray(x['a']),
        conv_state=jnp.asarray(x['conv_state']), recurrent_state=jnp.asarray(x['recurrent_state']),
        conv_weight=jnp.asarray(x['conv_weight']),
        conv_bias=jnp.asarray(x['conv_bias']) if 'conv_bias' in x else None,
        a_log=jnp.asarray(x['a_log']), dt_bias=jnp.asarray(x['dt_bias']),
        query_start_loc=i32('query_start_loc'), state_indices=i32('state_indices'),
        distribution=i32('distribution'), seq_lens=i32('seq_lens'), n_kq=n_kq, n_v=n_v, d_k=d_k,
        d_v=d_v, kernel_size=x['conv_weight'].shape[2])
    want = {'out': o, 'updated_conv_state': conv, 'updated_recurrent_state': state}
    ok, detail = True, []
    for impl in ('cpu', 'reference'):
        for name, w in want.items():
            w = np.asarray(w)
            got = npy(os.path.join(d, impl, name + '.npy')).astype(np.float64)
            if name == 'updated_conv_state':
                same = w.shape == got.shape and np.array_equal(w.astype(np.float64), got)
                ok = ok and same
                detail.append(f'{impl} {name} {"equal" if same else "DIFFERENT"}')
                continue
            oracle_path = os.path.join(d, 'oracle', name + '.npy')
            oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
            # Both states follow from q, k, v rounded to qkv's dtype (in XLA's f16 logistic,
            # which is not the correctly rounded one, ours differs by an ulp at times): the
            # coarser of the two dtypes' tolerances.
            tolerance = max(MOE_TOLERANCE.get(w.dtype, 2.0**-6),
                            MOE_TOLERANCE.get(qkv.dtype, 2.0**-6))
            apart = np.linalg.norm(w.astype(np.float64) - got) / (np.linalg.norm(oracle) or 1.0)
            ok = ok and w.shape == got.shape and apart <= 4 * tolerance
            detail.append(f'{impl} {name} {apart / tolerance:.2f}')
    print(f'{op:12s} {spec:30s} normwise apart, units of the tolerance (4 allowed): '
          + ', '.join(detail))
    return ok

def visible_rows(args, T, t):
    # Rows with at least one visible key under the causal forms (upstream gives the mean of v,
    # or their sum unnormalized, on the others; here they are zeros, as docs/ops says).
    r = np.arange(T)[:, None]
    j = np.arange(t)[None, :]
    keep = np.ones((T, t), bool)
    if args.get('is_causal'):
        keep &= j <= r
    causal = args.get('causal_mask')
    if causal:
        keep &= j <= r + causal['offset']
        if causal['window_size'] is not None:
            keep &= j > r + causal['offset'] - causal['window_size']
    return keep.any(axis=1)

for op in ('top_k', 'router_topk', 'ragged_gather', 'ragged_gather_reduce', 'fused_moe',
           'triangle_multiplication', 'triangle_multiplication_vjp', 'dot_product_attention',
           'ragged_paged_attention', 'splash_attention', 'splash_attention_vjp',
           'kimi_delta_attention', 'kimi_delta_attention_vjp', 'gated_delta_rule'):
    root = os.path.join(DUMP, op)
    if not os.path.isdir(root):
        continue
    for spec in sorted(os.listdir(root)):
        d = os.path.join(root, spec)
        args = json.load(open(os.path.join(d, 'case.json')))['args']
        x = inputs(d, args)
        out = os.path.join(d, 'cpu')
        if op in ('top_k', 'router_topk'):
            if x['scores'].size == 0:
                continue
            cases += 1
            if op == 'top_k':
                lengths = jnp.asarray(x['row_lengths']) if 'row_lengths' in x else None
                want = topk.topk(jnp.asarray(x['scores']), args['k'], lengths, return_scores=True)
                ok = np.array_equal(np.asarray(want[0]), npy(os.path.join(out, 'indices.npy')))
                bp = os.path.join(out, 'scores_bits.npy')
                if os.path.exists(bp):
                    ok = ok and np.array_equal(np.asarray(want[1]), npy(bp))
            else:
                s = jnp.asarray(x['scores']).astype(jnp.float32)
                w, i = router.rowmax_topk(s, args['k'])
                ok = np.array_equal(np.asarray(i), npy(os.path.join(out, 'indices.npy')))
                ok = ok and np.array_equal(np.asarray(w), npy(os.path.join(out, 'weights.npy')),
                                           equal_nan=True)
        elif op == 'ragged_gather':
            start, end = args['start'], args['end']
            if end == start:
                continue
            cases += 1
            bounds = jnp.asarray([start], jnp.int32), jnp.asarray([end], jnp.int32)
            want = np.asarray(gather(jnp.asarray(x['x']), jnp.asarray(x['indices']), *bounds))
            got = npy(os.path.join(out, 'out.npy')).astype(want.dtype)
            ok = np.array_equal(want[start:end].view(np.uint8), got[start:end].view(np.uint8))
        elif op == 'triangle_multiplication':
            tri = triangle_module()
            if tri is None:
                break
            cases += 1
            got = npy(os.path.join(out, 'out.npy')).astype(x['x'].dtype)
            # A sampled oracle is not dumped whole: then our output stands in for its norm.
            oracle_path = os.path.join(d, 'oracle', 'out.npy')
            oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
            want = np.asarray(tri.TriangleMultiplication()(
                x=jnp.asarray(x['x']), mask=jnp.asarray(x['mask']),
                **{n: jnp.asarray(x[n]) for n in TRIANGLE_WEIGHTS},
                triangle_type=args['triangle_type'],
                epsilon=args['epsilon']))
            norm = np.linalg.norm(oracle)
            def rel(a, b):
                return np.linalg.norm(a.astype(np.float64) - b.astype(np.float64)) / norm
            # Upstream rounds every stage to x's dtype (its chain of ops), we keep f32: they
            # agree within a few units of the dtype, normwise.
            ok = want.dtype == got.dtype and rel(want, got) <= 4 * MOE_TOLERANCE.get(got.dtype, 2.0**-6)
            if os.path.exists(oracle_path):
                print(f'{op:12s} {spec:30s} normwise vs the oracle: upstream '
                      f'{rel(want, oracle):.2e}, ours {rel(got, oracle):.2e}; between them '
                      f'{rel(want, got):.2e}')
            else:
                print(f'{op:12s} {spec:30s} normwise between them {rel(want, got):.2e} '
                      f'(oracle sampled: relative to our norm)')
        elif op == 'triangle_multiplication_vjp':
            # Upstream has no separate VJP op: jax.vjp of its layer, with respect to x and the
            # eight weights, for our dout; each gradient compared normwise as the forward is.
            tri = triangle_module()
            if tri is None:
                break
            cases += 1
            names = ('x',) + TRIANGLE_WEIGHTS
            layer = tri.TriangleMultiplication()
            def forward(*values):
                kw = dict(zip(names, values))
                return layer(mask=jnp.asarray(x['mask']), **kw,
                             triangle_type=args['triangle_type'], epsilon=args['epsilon'])
            _, pullback = jax.vjp(forward, *[jnp.asarray(x[n]) for n in names])
            grads = pullback(jnp.asarray(x['dout']))
            ok = True
            worst = 0.0
            for n, g in zip(names, grads):
                want = np.asarray(g)
                got = npy(os.path.join(out, f'd{n}.npy')).astype(x[n].dtype)
                oracle_path = os.path.join(d, 'oracle', f'd{n}.npy')
                oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got)
                norm = np.linalg.norm(oracle.astype(np.float64)) or 1.0
                apart = np.linalg.norm(want.astype(np.float64) - got.astype(np.float64)) / norm
                worst = max(worst, apart / MOE_TOLERANCE.get(got.dtype, 2.0**-6))
                ok = ok and want.dtype == got.dtype and apart <= 4 * MOE_TOLERANCE.get(got.dtype, 2.0**-6)
            print(f'{op:12s} {spec:30s} the nine gradients normwise apart: at most '
                  f'{worst:.2f} units of the tolerance (4 allowed)')
        elif op == 'dot_product_attention':
            # The mask forms upstream's bind takes (CausalMask offsets and windows,
            # normalize_output, dropout): its XLA path on the same inputs, compared normwise on
            # the rows that see a key.
            attention = attention_module()
            if attention is None:
                break
            unsupported = [a for a in ('mask', 'q_seq_lengths', 'kv_seq_lengths', 'local_window')
                           if args.get(a)]
            if unsupported:
                print(f'{op:12s} {spec:30s} skipped: {unsupported} not compared')
                continue
            cases += 1
            kwargs = dict(logits_scale=args['logits_scale'], is_causal=args['is_causal'],
                          normalize_output=args.get('normalize_output', True))
            causal = None
            if args.get('causal_mask'):
                causal = attention.CausalMask(offset=args['causal_mask']['offset'],
                                              window_size=args['causal_mask']['window_size'])
                kwargs['mask'] = causal
            # Upstream's Mask ranges and token indices, given as the dumped i32 tensors.
            ranges = {n: jnp.asarray(x[n]) for n in ('q_start', 'q_end', 'k_start', 'k_end')
                      if n in x}
            if ranges:
                kwargs['mask'] = attention.Mask(causal_mask=causal, **ranges)
            for n in ('q_indices', 'k_indices'):
                if n in x:
                    kwargs[n] = jnp.asarray(x[n])
            if args.get('logits_dtype') == 'bf16':
                kwargs['logits_dtype'] = jnp.bfloat16
            if args.get('logits_soft_cap'):
                kwargs['logits_soft_cap'] = args['logits_soft_cap']
            if 'bias' in x:
                kwargs['bias'] = jnp.asarray(x['bias'])
            if args.get('dropout_mask'):
                kwargs['dropout_mask'] = jnp.asarray(x['dropout_mask'])
                kwargs['dropout_rate'] = args['dropout_rate']
            want = np.asarray(attention.DotProductAttention()(
                jnp.asarray(x['q']), jnp.asarray(x['k']), jnp.asarray(x['v']), **kwargs))
            got = npy(os.path.join(out, 'out.npy')).astype(x['q'].dtype)
            T, H, t = x['q'].shape[-3], x['q'].shape[-2], x['k'].shape[-3]
            if ranges or 'q_indices' in x or 'k_indices' in x:
                # The rows that see a key, per (batch, head), from upstream's own Mask.as_array.
                m = kwargs.get('mask') or attention.Mask()
                if args['is_causal']:
                    m = m & attention.CausalMask()
                keep = np.asarray(m.as_array(kwargs.get('q_indices', T), kwargs.get('k_indices', t)))
                seen = np.broadcast_to(keep.any(axis=-1), want.shape[:-3] + (H, T))
                rows = np.broadcast_to(np.swapaxes(seen, -1, -2)[..., None], want.shape)
            else:
                seen = visible_rows(args, T, t)
                rows = np.broadcast_to(seen[:, None, None], want.shape[-3:])
                rows = np.broadcast_to(rows, want.shape)
            want_rows = np.where(rows, want.astype(np.float64), 0.0)
            got_rows = np.where(rows, got.astype(np.float64), 0.0)
            oracle_path = os.path.join(d, 'oracle', 'out.npy')
            oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
            norm = np.linalg.norm(np.where(rows, oracle, 0.0)) or 1.0
            apart = np.linalg.norm(want_rows - got_rows) / norm
            tolerance = MOE_TOLERANCE.get(got.dtype, 2.0**-6)
            if args.get('logits_dtype') == 'bf16':
                # Logits rounded to bf16 in different orders (upstream's chain, our one rounding).
                tolerance = max(tolerance, 2.0**-6)
            ok = want.dtype == got.dtype and apart <= 4 * tolerance
            print(f'{op:12s} {spec:30s} normwise apart on {int(rows[..., 0].sum())} of '
                  f'{rows[..., 0].size} rows: {apart / tolerance:.2f} units of the tolerance '
                  f'(4 allowed)')
        elif op == 'gated_delta_rule':
            ok = gdn_case(op, spec, d, args, x)
            cases += 1
        elif op == 'kimi_delta_attention':
            ok = kda_case(op, spec, d, args, x, out)
            if ok is None:
                break
            cases += 1
        elif op == 'kimi_delta_attention_vjp':
            ok = kda_vjp_case(op, spec, d, args, x, out)
            if ok is None:
                break
            cases += 1
        elif op in ('splash_attention', 'splash_attention_vjp'):
            ok = splash_case(op, spec, d, args, x, out)
            if ok is None:
                break
            cases += 1
        elif op == 'ragged_paged_attention':
            # Upstream's batched_ragged_paged_attention_reference on the same inputs: the output
            # normwise (its f32 softmax in another order, weights cast to out_dtype), the updated
            # cache bit for bit, lse within the output tolerance.
            D, Dp = x['queries'].shape[-1], x['kv_cache'].shape[-1]
            if Dp != (D + 127) // 128 * 128:
                print(f'{op:12s} {spec:30s} skipped: upstream pads the cache\'s head dim to a '
                      f'multiple of 128 (D {D}, Dp {Dp})')
                continue
            cases += 1
            meta = {n: jnp.asarray(np.asarray(args[n], np.int32))
                    for n in ('kv_lens', 'page_indices', 'cu_q_lens', 'distribution')}
            kw = {n: args[n] for n in ('sm_scale', 'sliding_window', 'soft_cap', 'q_scale',
                                       'k_scale', 'v_scale') if args.get(n) is not None}
            res = rpa.batched_ragged_paged_attention_reference(
                jnp.asarray(x['queries']), jnp.asarray(x['keys']), jnp.asarray(x['values']),
                jnp.asarray(x['kv_cache']), **meta, use_causal_mask=args['use_causal_mask'],
                skip_kv_update=args['skip_kv_update'], return_lse=args['return_lse'],
                out_dtype=DTYPES[args['out_dtype']], **kw)
            want = np.asarray(res[0])
            got = npy(os.path.join(out, 'out.npy')).astype(want.dtype)
            oracle_path = os.path.join(d, 'oracle', 'out.npy')
            oracle = (npy(oracle_path) if os.path.exists(oracle_path) else got).astype(np.float64)
            norm = np.linalg.norm(oracle) or 1.0
            tolerance = MOE_TOLERANCE.get(got.dtype, 2.0**-6)
            apart = np.linalg.norm(want.astype(np.float64) - got.astype(np.float64)) / norm
            ok = apart <= 4 * tolerance
            detail = f'out {apart / tolerance:.2f} units of the tolerance'
            if not args['skip_kv_update']:
                cache_want = np.asarray(res[1])
                cache_got = npy(os.path.join(out, 'updated_kv_cache.npy')).astype(cache_want.dtype)
                same = np.array_equal(cache_want.view(np.uint8), cache_got.view(np.uint8))
                ok = ok and same
                detail += f', cache {"identical" if same else "DIFFERENT"}'
            if args['return_lse']:
                lse_want = np.asarray(res[2]).astype(np.float64)
                lse_got = npy(os.path.join(out, 'lse.npy')).astype(np.float64)
                finite = np.isfinite(lse_want)
                lse_ok = np.array_equal(finite, np.isfinite(lse_got)) and np.allclose(
                    lse_want[finite], lse_got[finite], rtol=4 * tolerance, atol=4 * tolerance)
                ok = ok and lse_ok
                detail += f', lse {"close" if lse_ok else "FAR"}'
            print(f'{op:12s} {spec:30s} {detail}')
        elif op == 'fused_moe':
            if args['act_fn'] != 'silu':
                print(f'{op:12s} {spec:30s} skipped: upstream\'s reference has act_fn silu only')
                continue
            cases += 1
            got = npy(os.path.join(out, 'out.npy')).astype(x['x'].dtype)
            oracle = npy(os.path.join(d, 'oracle', 'out.npy')).astype(np.float64)
            bias = {k: jnp.asarray(x[k]) for k in ('w1_bias', 'w2_bias') if k in x}
            want = np.asarray(fused_moe.fused_moe_reference(
                jnp.asarray(x['x']), jnp.asarray(x['w1']), jnp.asarray(x['w2']),
                jnp.asarray(x['gating']), topk=args['topk'], renormalize=args['renormalize'],
                act_fn='silu', **bias))
            norm = np.linalg.norm(oracle)
            def rel(a, b):
                return np.linalg.norm(a.astype(np.float64) - b.astype(np.float64)) / norm
            ok = want.dtype == got.dtype and rel(want, got) <= MOE_TOLERANCE.get(got.dtype, 2.0**-6)
            print(f'{op:12s} {spec:30s} normwise vs the oracle: upstream {rel(want, oracle):.2e},'
                  f' ours {rel(got, oracle):.2e}; between them {rel(want, got):.2e}')
        else:
            got = npy(os.path.join(out, 'out.npy')).astype(x['x'].dtype)
            if got.size == 0:
                continue
            cases += 1
            want = gather_reduce.ragged_gather_reduce(
                jnp.asarray(x['x']), jnp.asarray(x['indices']), jnp.asarray(x['topk_weights']),
                jnp.asarray(x['valid_rows_mask']), args['reduce_group_size'])
            want = np.asarray(want)
            ok = want.dtype == got.dtype and within_bound(
                want, got, x['x'], x['indices'], x['topk_weights'], x['valid_rows_mask'],
                args['reduce_group_size'])
            same = np.mean(want == got)
            print(f'{op:12s} {spec:30s} equal bits: {same:.4%} of the elements')
        agreed += ok
        print(f'{op:12s} {spec:30s} {"agrees" if ok else "DIFFERS"}')
print(f'{agreed} of {cases} cases agree with upstream')
sys.exit(0 if agreed == cases else 1)
