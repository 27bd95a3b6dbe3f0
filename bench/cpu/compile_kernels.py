"""Compile the step kernels for an H200 (sm_90) on a machine with no GPU, every variant.

Triton's interpreter runs a kernel as Python, so it passes code the compiler rejects (a return
inside a branch, a reshape of the wrong shape). This builds each kernel's every constexpr
variant down to a cubin with the ptxas bundled in Triton's wheel, and prints one line each.

    pip download --no-deps triton -d /tmp/trit && pip install --target /tmp/tsite /tmp/trit/*.whl
    PYTHONPATH=/tmp/tsite:. python bench/cpu/compile_kernels.py
"""

import itertools

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from engine.kernels import attention, batch_attention, gemv, ops, sampling

target = GPUTarget("cuda", 90, 32)


def build(fn, sig, consts, opts=None):
    names = fn.arg_names
    missing = [n for n in names if n not in sig and n not in consts]
    if missing:  # an argument given no type or value would compile as None, untested
        return f"FAIL: no type or value for {', '.join(missing)}"
    signature = {n: sig.get(n, "constexpr") for n in names}
    src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(k),): v for k, v in consts.items()})
    try:
        triton.compile(src, target=target, options=opts or {})
        return "ok"
    except Exception as e:  # noqa: BLE001 (every failure is a line of the report)
        return "FAIL " + str(e).splitlines()[-1][:200] if str(e) else repr(e)
bf, i32, f32 = "*bf16", "i32", "fp32"
g16 = {"x_ptr": bf, "w_ptr": bf, "b_ptr": bf, "out_ptr": bf, "part_ptr": "*fp32", "lock_ptr": "*i32", "T": i32, "N": i32, "K": i32, "x_stride": i32, "k_split": i32}
for swap, silu, gdc, ieee in itertools.product((False, True), repeat=4):
    c = {"HAS_BIAS": False, "BLOCK_N": 64 if swap else 32, "BLOCK_K": 128, "EVEN_K": True, "IEEE": ieee, "SPLIT": 1, "SWAP": swap, "DEFER": False, "GDC": gdc, "SILU": silu}
    sig = dict(g16)
    if ieee: sig.update(x_ptr="*fp32", w_ptr="*fp32", b_ptr="*fp32", out_ptr="*fp32")
    print("gemm16", {"swap": swap, "silu": silu, "gdc": gdc, "ieee": ieee}, build(gemv._gemm16, sig, c, {"num_warps": 4, "num_stages": 3}))
for defer, split in ((True, 3), (False, 2)):
    c = {"HAS_BIAS": False, "BLOCK_N": 64, "BLOCK_K": 128, "EVEN_K": False, "IEEE": False, "SPLIT": split, "SWAP": True, "DEFER": defer, "GDC": True, "SILU": False}
    print("gemm16 split", split, "defer", defer, build(gemv._gemm16, g16, c))
gv = {"x_ptr": bf, "r_ptr": bf, "nw_ptr": bf, "s_ptr": bf, "t_ptr": bf, "w_ptr": bf, "b_ptr": bf, "out_ptr": bf, "N": i32, "K": i32, "eps": f32, "lock_ptr": "*i32"}
for prologue, silu, gdc, bias in itertools.product((0, 1), (False, True), (False, True), (False, True)):
    if prologue and silu: continue
    c = {"PROLOGUE": prologue, "HAS_RES": True, "HAS_BIAS": bias, "TAP": prologue == 1, "BLOCK_N": 2, "BLOCK_K": 1024, "EVEN_K": False, "GDC": gdc, "SILU": silu, "ADD_NORM": False, "BLOCK_ROW": 1}
    print("gemv", {"prologue": prologue, "silu": silu, "gdc": gdc, "bias": bias}, build(gemv._gemv, gv, c))
for gdc, bias, tap in itertools.product((False, True), repeat=3):  # o_proj or down_proj with the next norm after it
    c = {"PROLOGUE": 0, "HAS_RES": False, "HAS_BIAS": bias, "TAP": tap, "BLOCK_N": 8, "BLOCK_K": 512, "EVEN_K": True, "GDC": gdc, "SILU": False, "ADD_NORM": True, "BLOCK_ROW": 2048}
    print("gemv add_norm", {"gdc": gdc, "bias": bias, "tap": tap}, build(gemv._gemv, gv, c))
gr = {"x_ptr": bf, "r_ptr": bf, "nw_ptr": bf, "s_ptr": bf, "t_ptr": bf, "w_ptr": bf, "b_ptr": bf, "q_ptr": bf, "k_cache_ptr": bf, "v_cache_ptr": bf, "page_table_ptr": "*i64", "pos_ptr": "*i64", "inv_freq_ptr": "*fp32", "K": i32, "eps": f32}
for prologue, gdc in itertools.product((0, 1), (False, True)):
    c = {"PROLOGUE": prologue, "HAS_RES": prologue == 1, "HAS_BIAS": True, "TAP": prologue == 1, "BLOCK_N": 2, "BLOCK_K": 2048 if prologue else 1024, "EVEN_K": True, "GDC": gdc, "H": 12, "KVH": 2, "D": 128, "PS": 16}
    print("gemv_rope", {"prologue": prologue, "gdc": gdc}, build(gemv._gemv_rope, gr, c, {"num_warps": 4, "num_stages": 1}))
for gdc in (False, True):
    print("add_rms_norm", gdc, build(ops._add_rms_norm, {"x_ptr": "*fp32", "res_ptr": bf, "w_ptr": bf, "out_ptr": bf, "tap_ptr": bf, "n_cols": i32, "part_stride": i32, "tap_stride": i32, "eps": f32}, {"HAS_RES": True, "PARTS": 3, "BLOCK": 2048, "TAP": gdc, "GDC": gdc}))
    print("silu_mul", gdc, build(ops._silu_mul, {"gu_ptr": bf, "out_ptr": bf, "n_cols": i32}, {"BLOCK": 1024, "GDC": gdc}))
    for heads in (12, 0):  # 0: a DFlash drafter's context, keys and values only
        print("qk_rope_store", heads, gdc, build(ops._qk_rope_store, {"qkv_ptr": bf, "pos_ptr": "*i64", "inv_freq_ptr": "*fp32", "qw_ptr": bf, "kw_ptr": bf, "q_ptr": bf, "k_cache_ptr": bf, "v_cache_ptr": bf, "page_table_ptr": "*i64", "rows_ptr": "*i64", "table_stride": i32, "qkv_stride": i32, "eps": f32}, {"H": heads, "KVH": 2, "D": 128, "PS": 16, "QK_NORM": True, "BATCHED": False, "GDC": gdc}, {"num_warps": 1}))
    # merge: the last split merges (no merge kernel); rope: RoPE and the K/V stores inside (with q/k norms or not)
    for merge, rope, qk_norm in [(False, False, False), (True, False, False), (False, True, False), (True, True, False), (True, True, True)]:
        print("attend_split", gdc, merge, rope, qk_norm, build(attention._attend_split, {"q_ptr": bf, "k_cache_ptr": bf, "v_cache_ptr": bf, "page_table_ptr": "*i64", "start_ptr": "*i64", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "scale": f32, "out_ptr": bf, "lock_ptr": "*i32", "qkv_ptr": bf, "inv_freq_ptr": "*fp32", "qw_ptr": bf, "kw_ptr": bf, "eps": f32}, {"T": 1, "G": 6, "KVH": 2, "D": 128, "M": 16, "ROWS": 16, "PS": 16, "SPLITS": 64, "CHUNK": 0, "BLOCK_N": 32, "CAUSAL": True, "FP32": False, "GDC": gdc, "MERGE": merge, "ROPE": rope, "QK_NORM": qk_norm}))
    print("merge_splits", gdc, build(attention._merge_splits, {"part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "out_ptr": bf}, {"G": 6, "KVH": 2, "D": 128, "ROWS": 16, "SPLITS": 64, "GDC": gdc}))
# the batched decode step's attention, whole contexts or in slices with their merge
for splits in (1, 4):
    print("batch_decode", splits, build(batch_attention._batch_decode, {"q_ptr": bf, "k_cache_ptr": bf, "v_cache_ptr": bf, "page_table_ptr": "*i64", "positions_ptr": "*i64", "out_ptr": bf, "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "table_stride": i32, "scale": f32}, {"G": 6, "KVH": 2, "D": 128, "M": 16, "PS": 16, "BLOCK_N": 64, "FP32": False, "SPLITS": splits}))
print("batch_merge", build(batch_attention._batch_merge, {"part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "out_ptr": bf}, {"H": 12, "D": 128, "SPLITS": 4}))
# the fused top-k draw (engine/kernels/sampling.py): bf16 and float32 logits, top-k 1 to 64,
# top-p on and off, one seed or each row's own; the Qwen vocabulary's 38 blocks
for dtype, kp in itertools.product((bf, "*fp32"), (2, 32, 64)):
    print("block_top_k", dtype, kp, build(sampling._block_top_k, {"logits_ptr": dtype, "stride": i32, "inv_t": f32, "V": i32, "cand_ptr": "*i64"}, {"BLOCK": sampling.BLOCK, "KP": kp}))
for kp, top_p, row_seeds in itertools.product((2, 32, 64), (False, True), (False, True)):
    cands = 38 * kp
    print("draw", kp, top_p, row_seeds, build(sampling._draw, {"cand_ptr": "*i64", "positions_ptr": "*i64", "seeds_ptr": "*i64", "seed": "i64", "noise": i32, "top_p": f32, "out_ptr": "*i64"}, {"CANDS": cands, "CP": triton.next_power_of_2(cands), "K": max(1, kp - 3), "KP": kp, "ROW_SEEDS": row_seeds, "TOP_P": top_p}, {"num_warps": 4}))
