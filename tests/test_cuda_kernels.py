"""The Triton kernels against the torch reference path (CUDA only).

Every check draws fresh random inputs, scatters the context over shuffled pages, and poisons
outputs first, so an unwritten element or a wrong page lookup cannot pass.
"""

import pytest
import torch

from engine.network.decoder import RMSNorm, rope
from engine.runtime.attention import fused_attention, reference_attention

pytestmark = pytest.mark.gpu

PAGE = 16
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture
def device():
    return "cuda"


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def paged_cache(length: int, kvh: int, d: int, dtype, device, spare: int = 3):
    """K/V of `length` positions scattered over shuffled pages: (k_cache, v_cache, pages, slots)."""
    pages_needed = -(-length // PAGE)
    num_pages = pages_needed + spare
    pages = torch.randperm(num_pages)[:pages_needed]
    k_cache = torch.randn(num_pages * PAGE, kvh, d, dtype=dtype, device=device)
    v_cache = torch.randn(num_pages * PAGE, kvh, d, dtype=dtype, device=device)
    pos = torch.arange(length)
    slots = pages[pos // PAGE] * PAGE + pos % PAGE
    return k_cache, v_cache, pages.to(device), slots.to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t,length,causal", [(1, 1, True), (1, 300, True), (2, 37, False), (5, 1500, True),
                                             (16, 16, True), (16, 1100, True), (16, 1100, False)])
@pytest.mark.parametrize("heads", [(32, 8, 128), (12, 2, 128), (14, 2, 64)])
def test_paged_decode_attention_matches_reference(dtype, t, length, causal, heads, device):
    from engine.kernels.attention import paged_decode_attention

    h, kvh, d = heads
    k_cache, v_cache, pages, slots = paged_cache(length, kvh, d, dtype, device)
    q = torch.randn(t, h, d, dtype=dtype, device=device)
    start = torch.tensor([length - t], device=device)
    out = paged_decode_attention(q, k_cache, v_cache, pages, start, PAGE, d**-0.5, causal)
    ref = reference_attention(q.double(), k_cache[slots].double(), v_cache[slots].double(), causal, d**-0.5)
    assert rel_err(out, ref) < TOL[dtype]


@pytest.mark.parametrize("splits", [8, 64])
def test_split_count_does_not_change_the_result(splits, device):
    from engine.kernels.attention import paged_decode_attention

    k_cache, v_cache, pages, slots = paged_cache(2000, 8, 128, torch.float32, device)
    q = torch.randn(4, 32, 128, device=device)
    start = torch.tensor([1996], device=device)
    out = paged_decode_attention(q, k_cache, v_cache, pages, start, PAGE, 0.1, True, splits=splits)
    ref = reference_attention(q.double(), k_cache[slots].double(), v_cache[slots].double(), True, 0.1)
    assert rel_err(out, ref) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t,length", [(1, 1), (1, 300), (1, 1500), (2, 37), (4, 1100)])
@pytest.mark.parametrize("heads", [(12, 2, 128), (14, 2, 64), (32, 8, 128)])
def test_the_last_split_merges_a_decode_step_as_the_merge_kernel_does(dtype, t, length, heads, device,
                                                                       monkeypatch):
    from engine.kernels import attention, overlap
    from engine.kernels.gemv import split_locks

    h, kvh, d = heads
    k_cache, v_cache, pages, slots = paged_cache(length, kvh, d, dtype, device)
    q = torch.randn(t, h, d, dtype=dtype, device=device)
    start = torch.tensor([length - t], device=device)
    out = {}
    for merge in (False, True):
        monkeypatch.setattr(overlap, "merge_in_attention", lambda merge=merge: merge)
        out[merge] = attention.paged_decode_attention(q, k_cache, v_cache, pages, start, PAGE, d**-0.5, True)
    ref = reference_attention(q.double(), k_cache[slots].double(), v_cache[slots].double(), True, d**-0.5)
    assert rel_err(out[True], ref) < TOL[dtype]
    assert rel_err(out[True], out[False]) < TOL[dtype] / 4
    assert not split_locks(q.device).any()  # every counter left at zero for the next step


def test_the_last_split_merges_inside_a_graph_replayed_at_new_lengths(device, monkeypatch):
    from engine.kernels import attention, overlap

    monkeypatch.setattr(overlap, "merge_in_attention", lambda: True)
    k_cache, v_cache, pages, slots = paged_cache(1500, 2, 128, torch.bfloat16, device)
    q = torch.randn(1, 12, 128, dtype=torch.bfloat16, device=device)
    start = torch.tensor([10], device=device)
    attention.paged_decode_attention(q, k_cache, v_cache, pages, start, PAGE, 128**-0.5, True)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attention.paged_decode_attention(q, k_cache, v_cache, pages, start, PAGE, 128**-0.5, True)
    for length in (11, 700, 1500, 64):
        start.fill_(length - 1)
        q.normal_()
        graph.replay()
        ref = reference_attention(q.double(), k_cache[slots[:length]].double(), v_cache[slots[:length]].double(),
                                  True, 128**-0.5)
        assert rel_err(out, ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("length", [1, 300, 1500])
@pytest.mark.parametrize("heads", [(12, 2, 128), (14, 2, 64), (32, 8, 128)])
def test_rope_inside_the_attention_kernel_matches_the_two_kernels(merge, qk_norm, length, heads, device,
                                                                         monkeypatch):
    from engine.kernels import attention, overlap
    from engine.kernels.ops import qk_rope_store

    monkeypatch.setattr(overlap, "merge_in_attention", lambda: merge)
    h, kvh, d = heads
    dtype = torch.bfloat16
    k_cache, v_cache, pages, _ = paged_cache(length, kvh, d, dtype, device)
    qkv = torch.randn(1, (h + 2 * kvh) * d, dtype=dtype, device=device)
    inv_freq = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=device).float() / d))
    q_norm = (1 + 0.1 * torch.randn(d, device=device)).to(dtype) if qk_norm else None
    k_norm = (1 + 0.1 * torch.randn(d, device=device)).to(dtype) if qk_norm else None
    start = torch.tensor([length - 1], device=device)
    k_two, v_two = k_cache.clone(), v_cache.clone()
    q = qk_rope_store(qkv, start, inv_freq, q_norm, k_norm, 1e-6, k_two, v_two, pages, PAGE, h)
    expected = attention.paged_decode_attention(q, k_two, v_two, pages, start, PAGE, d**-0.5, True)
    out = attention.rope_store_attend(qkv, inv_freq, q_norm, k_norm, 1e-6, k_cache, v_cache, pages, start, PAGE,
                                      h, d**-0.5)
    assert torch.equal(k_cache, k_two) and torch.equal(v_cache, v_two)  # the token's key and value, and no other
    # the query is rotated in registers and scored from there, not read back rounded to bf16 as the
    # two kernels do: within rounding, not bit for bit (7 of 36 cases differed on the H200)
    assert rel_err(out, expected) < TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k,bias", [(1536, 1536, True), (896, 896, True), (2560, 4096, False)])
def test_the_norm_after_o_proj_in_its_last_program_matches_the_two_kernels(dtype, n, k, bias, device):
    from engine.kernels.gemv import launch, linear_add_norm, split_locks
    from engine.kernels.ops import add_rms_norm

    x = torch.randn(1, k, dtype=dtype, device=device)
    w = (torch.randn(n, k, device=device) / k**0.5).to(dtype)
    b = torch.randn(n, dtype=dtype, device=device) if bias else None
    stream = torch.randn(1, n, dtype=dtype, device=device)
    norm_w = (1 + 0.1 * torch.randn(n, device=device)).to(dtype)
    two = stream.clone()
    expected, _ = add_rms_norm(launch(x, w, b, torch.empty(1, n, dtype=dtype, device=device)), two, norm_w, 1e-6)
    tap = torch.full((3, n), float("nan"), dtype=dtype, device=device)[1:2]  # a row of a larger buffer
    h, one = linear_add_norm(x, w, b, stream, norm_w, 1e-6, tap=tap)
    assert one is stream and torch.equal(one, two)  # the stream, in place, bit for bit
    assert torch.equal(tap, two)
    assert rel_err(h, expected) < TOL[dtype] / 4  # the norm's sum may round its last bit otherwise
    assert not split_locks(x.device).any()


@pytest.mark.parametrize("t,length", [(40, 40), (40, 300)])
def test_fused_attention_matches_reference(t, length, device):
    keys = torch.randn(length, 2, 64, device=device)
    values = torch.randn(length, 2, 64, device=device)
    q = torch.randn(t, 8, 64, device=device)
    out = fused_attention(q, keys, values, True, 0.125)
    ref = reference_attention(q.double(), keys.double(), values.double(), True, 0.125)
    assert rel_err(out, ref) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_residual", [True, False])
def test_add_rms_norm_matches_the_module(dtype, with_residual, device):
    from engine.kernels.ops import add_rms_norm

    norm = RMSNorm(2560, 1e-6).to(device, dtype)
    torch.nn.init.normal_(norm.weight, 1.0, 0.1)
    x = torch.randn(5, 2560, device=device, dtype=dtype)
    residual = torch.randn(5, 2560, device=device, dtype=dtype) if with_residual else None
    stream = x + residual if with_residual else x
    out, new_residual = add_rms_norm(x, None if residual is None else residual.clone(), norm.weight, norm.eps)
    assert torch.equal(new_residual, stream)
    assert rel_err(out, norm(stream)) < TOL[dtype] / 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_matches_torch(dtype, device):
    from engine.kernels.ops import silu_mul

    gate_up = torch.randn(3, 2 * 3000, device=device, dtype=dtype)
    gate, up = gate_up.chunk(2, dim=-1)
    ref = torch.nn.functional.silu(gate) * up
    assert rel_err(silu_mul(gate_up), ref) < TOL[dtype] / 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("qk_norm", [True, False])
def test_qk_rope_store_matches_the_torch_layer(dtype, qk_norm, device):
    from engine.kernels.ops import qk_rope_store

    t, h, kvh, d, theta = 7, 8, 2, 64, 1e6
    k_cache, v_cache, pages, _ = paged_cache(200, kvh, d, dtype, device)
    k_cache.fill_(float("nan"))
    v_cache.fill_(float("nan"))
    qkv = torch.randn(t, (h + 2 * kvh) * d, device=device, dtype=dtype)
    positions = torch.arange(190, 190 + t, device=device)
    q_norm = torch.randn(d, device=device, dtype=dtype) * 0.1 + 1 if qk_norm else None
    k_norm = torch.randn(d, device=device, dtype=dtype) * 0.1 + 1 if qk_norm else None
    dims = torch.arange(0, d, 2, dtype=torch.float, device=device)
    inv_freq = 1.0 / theta ** (dims / d)
    q = qk_rope_store(qkv, positions, inv_freq, q_norm, k_norm, 1e-6, k_cache, v_cache, pages, PAGE, h)

    rq, rk, rv = qkv.split([h * d, kvh * d, kvh * d], dim=-1)
    rq, rk, rv = rq.view(t, h, d), rk.view(t, kvh, d), rv.view(t, kvh, d)
    if qk_norm:
        qn, kn = RMSNorm(d, 1e-6).to(device, dtype), RMSNorm(d, 1e-6).to(device, dtype)
        qn.weight.data.copy_(q_norm)
        kn.weight.data.copy_(k_norm)
        rq, rk = qn(rq), kn(rk)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    slots = pages[positions // PAGE] * PAGE + positions % PAGE
    tol = TOL[dtype] / 4
    assert rel_err(q, rope(rq, cos, sin)) < tol
    assert rel_err(k_cache[slots], rope(rk, cos, sin)) < tol
    assert torch.equal(v_cache[slots], rv)


def test_narrow_heads_of_tiny_models(device):
    from engine.kernels.attention import paged_decode_attention

    k_cache, v_cache, pages, slots = paged_cache(50, 2, 8, torch.float32, device)
    q = torch.randn(3, 4, 8, device=device)
    start = torch.tensor([47], device=device)
    out = paged_decode_attention(q, k_cache, v_cache, pages, start, PAGE, 8**-0.5, True)
    ref = reference_attention(q.double(), k_cache[slots].double(), v_cache[slots].double(), True, 8**-0.5)
    assert rel_err(out, ref) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t", [1, 2, 7, 16])
@pytest.mark.parametrize("n,k,bias", [(2048, 1536, True), (1536, 8960, False), (17920, 1536, False),
                                      (19456, 2560, True), (151936, 896, False), (100, 72, True), (37, 1000, False)])
def test_step_linear_matches_cublas(dtype, t, n, k, bias, device):
    from engine.kernels.gemv import linear

    x = torch.randn(t, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device) / k**0.5
    b = torch.randn(n, dtype=dtype, device=device) if bias else None
    expect = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    got = linear(x, w, b)
    assert got.shape == (t, n) and got.dtype == dtype
    assert rel_err(got, expect) < TOL[dtype] / 4


def test_step_linear_reads_rows_with_a_stride(device):
    from engine.kernels.gemv import linear

    wide = torch.randn(3, 2 * 512, device=device)
    x = wide[:, :512]  # every row of x is 1024 elements from the next
    w = torch.randn(64, 512, device=device)
    assert rel_err(linear(x, w), x.double() @ w.double().T) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t", [1, 5, 16])
@pytest.mark.parametrize("first_layer", [True, False])
@pytest.mark.parametrize("n,k,bias", [(2048, 1536, True), (17920, 1536, False), (300, 80, False)])
def test_norm_linear_matches_norm_then_linear(dtype, t, first_layer, n, k, bias, device):
    from engine.kernels.gemv import folds_norm, linear, norm_linear
    from engine.kernels.ops import add_rms_norm

    x = torch.randn(t, k, dtype=dtype, device=device)
    residual = None if first_layer else torch.randn(t, k, dtype=dtype, device=device)
    norm_w = 1 + 0.1 * torch.randn(k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device) / k**0.5
    b = torch.randn(n, dtype=dtype, device=device) if bias else None
    kept = None if residual is None else residual.clone()
    got, stream = norm_linear(x, residual, norm_w, 1e-6, w, b)
    h, expect_stream = add_rms_norm(x, kept, norm_w, 1e-6)
    assert torch.equal(stream, expect_stream)  # the next layers' residual, bit for bit
    expect = linear(h, w, b)
    assert rel_err(got, expect.to(torch.float64)) < (1e-6 if dtype == torch.float32 else 1e-3)
    assert folds_norm(x, w) == (t == 1 and n <= 4096)  # both paths above are exercised


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t", [1, 2, 7, 16, 40])
@pytest.mark.parametrize("i,k", [(4864, 896), (8960, 1536), (9728, 2560), (150, 80)])
def test_silu_in_the_gate_up_epilogue_is_bit_for_bit_the_two_kernels(dtype, t, i, k, device):
    """The gate/up shapes of Qwen2.5-0.5B, 1.5B and Qwen3-4B (GEMV, 16-row kernel with the weights
    left or right), a tiny one, and a long step (cuBLAS): same programs, same sums, same rounding."""
    from engine.kernels.gemv import linear, linear_silu
    from engine.kernels.ops import silu_mul

    x = torch.randn(t, k, dtype=dtype, device=device)
    w = torch.randn(2 * i, k, dtype=dtype, device=device) / k**0.5
    assert torch.equal(linear_silu(x, w), silu_mul(linear(x, w)))
    assert torch.equal(linear_silu(x, w, invariant=True), silu_mul(linear(x, w, invariant=True)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden,heads,kv_heads,head_dim", [(896, 14, 2, 64), (1536, 12, 2, 128), (2560, 20, 4, 128)])
@pytest.mark.parametrize("first_layer", [True, False])
def test_rope_in_the_qkv_epilogue_is_bit_for_bit_the_two_kernels(dtype, hidden, heads, kv_heads, head_dim,
                                                                 first_layer, device):
    """The q/k/v shapes of Qwen2.5-0.5B, 1.5B (the norm folded into the product) and a wider one (the
    norm a kernel of its own), with their bias: the queries, the cache and the residual stream as
    norm_linear then qk_rope_store leave them, at a position in the middle of a page."""
    from engine.kernels.gemv import norm_linear, norm_linear_rope
    from engine.kernels.ops import qk_rope_store
    from engine.network.decoder import rope_frequencies

    n = (heads + 2 * kv_heads) * head_dim
    x = torch.randn(1, hidden, dtype=dtype, device=device)
    residual = None if first_layer else torch.randn(1, hidden, dtype=dtype, device=device)
    norm_w = (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
    w = (torch.randn(n, hidden, device=device) / hidden**0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype)
    pages, position = torch.tensor([5, 2, 7, 0], device=device), torch.tensor([37], device=device)
    inv_freq = rope_frequencies(head_dim, 1e6, torch.device(device))
    caches = [torch.zeros(8 * 16, kv_heads, head_dim, dtype=dtype, device=device) for _ in range(4)]
    qkv, stream = norm_linear(x, None if first_layer else residual.clone(), norm_w, 1e-6, w, b)
    q = qk_rope_store(qkv, position, inv_freq, None, None, 0.0, caches[0], caches[1], pages, 16, heads)
    fused_q, fused_stream = norm_linear_rope(x, None if first_layer else residual.clone(), norm_w, 1e-6, w, b,
                                             position, inv_freq, caches[2], caches[3], pages, 16, heads)
    assert caches[0].abs().sum() > 0 and caches[1].abs().sum() > 0
    assert torch.equal(fused_q, q) and torch.equal(fused_stream, stream)
    assert torch.equal(caches[2], caches[0]) and torch.equal(caches[3], caches[1])


def test_long_steps_fall_back_to_cublas(device):
    from engine.kernels.gemv import norm_linear

    x, residual = torch.randn(40, 64, device=device), torch.randn(40, 64, device=device)
    stream_expect = x + residual
    out, stream = norm_linear(x, residual, torch.ones(64, device=device), 1e-6, torch.eye(64, device=device))
    assert torch.allclose(stream, stream_expect)
    assert torch.allclose(out, RMSNorm(64, 1e-6).to(device)(stream_expect), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads", [(32, 8, 128), (12, 2, 128), (14, 2, 64)])
def test_fixed_splits_make_a_query_independent_of_its_step(dtype, heads, device):
    from engine.kernels.attention import invariant_chunk, paged_decode_attention

    h, kvh, d = heads
    length, t = 700, 16
    chunk = invariant_chunk(1024, kvh)
    k_cache, v_cache, pages, slots = paged_cache(length, kvh, d, dtype, device)
    q = torch.randn(t, h, d, dtype=dtype, device=device)
    start = length - t

    def attend(rows, first):
        at = torch.tensor([first], device=device)
        return paged_decode_attention(rows, k_cache, v_cache, pages, at, PAGE, d**-0.5, True, chunk=chunk)

    verify = attend(q, start)
    ref = reference_attention(q, k_cache[slots], v_cache[slots], True, d**-0.5)
    assert rel_err(verify, ref) < TOL[dtype]
    for i in (0, 5, 15):
        # bit for bit: a query's result does not depend on how many queries share its step
        assert torch.equal(attend(q[i : i + 1], start + i)[0], verify[i]), i


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k,bias", [(2048, 1536, True), (1536, 8960, False), (151936, 896, False), (300, 80, True)])
def test_invariant_linears_give_a_row_the_same_bits_in_any_step(dtype, n, k, bias, device):
    from engine.kernels.gemv import linear, norm_linear

    x = torch.randn(16, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device) / k**0.5
    b = torch.randn(n, dtype=dtype, device=device) if bias else None
    verify = linear(x, w, b, invariant=True)
    assert rel_err(verify, torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
                   ) < TOL[dtype] / 4
    norm_w = 1 + 0.1 * torch.randn(k, dtype=dtype, device=device)
    residual = torch.randn(16, k, dtype=dtype, device=device)
    normed, _ = norm_linear(x, residual.clone(), norm_w, 1e-6, w, b, invariant=True)
    for i in (0, 7, 15):
        assert torch.equal(linear(x[i : i + 1], w, b, invariant=True)[0], verify[i]), i
        row, _ = norm_linear(x[i : i + 1], residual[i : i + 1].clone(), norm_w, 1e-6, w, b, invariant=True)
        assert torch.equal(row[0], normed[i]), i


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", [(16, 64, 4, 2, 2), (32, 128, 4, 2, 3), (64, 64, 4, 2, 1, True),
                                    (64, 64, 4, 2, 4, True)])
@pytest.mark.parametrize("t", [2, 16])
def test_split_and_left_weight_products_match_and_reset_their_counters(dtype, config, t, device):
    from engine.kernels.gemv import _LOCKS, launch

    n, k = 200, 700  # neither a multiple of the tile nor of the K slab
    x = torch.randn(t, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device) / k**0.5
    b = torch.randn(n, dtype=dtype, device=device)
    expect = torch.nn.functional.linear(x.double(), w.double(), b.double())
    first = launch(x, w, b, torch.empty(t, n, dtype=dtype, device=device), config=config)
    again = launch(x, w, b, torch.empty(t, n, dtype=dtype, device=device), config=config)
    assert rel_err(first, expect) < TOL[dtype] / 4
    assert torch.equal(first, again)  # the partials are added in split order, whoever finishes last
    assert all(int(locks.sum()) == 0 for locks in _LOCKS.values())  # ready for the next product


@pytest.mark.parametrize("t", [1, 16])
@pytest.mark.parametrize("n,k", [(20000, 1536), (20000, 2560), (2048, 1536)])
def test_logits_are_written_as_the_float32_sums_that_bf16_rounds(t, n, k, device):
    from engine.kernels.gemv import linear

    x = torch.randn(t, k, dtype=torch.bfloat16, device=device)
    w = torch.randn(n, k, dtype=torch.bfloat16, device=device) / k**0.5
    logits = linear(x, w, out_dtype=torch.float32)
    assert logits.dtype == torch.float32
    assert rel_err(logits, torch.nn.functional.linear(x.double(), w.double())) < 1e-5  # no bf16 rounding
    assert torch.equal(logits.to(torch.bfloat16), linear(x, w))  # the bf16 product: these sums rounded


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", [(16, 64, 4, 2, 2, False, True), (32, 128, 4, 2, 3, False, True),
                                    (64, 64, 4, 2, 4, True, True)])
@pytest.mark.parametrize("t", [2, 16])
@pytest.mark.parametrize("k", [700, 896])  # K slabs masked at the end, or all whole (the last split shorter)
def test_split_partials_add_up_to_the_product_in_the_residual_add(dtype, config, t, k, device):
    from engine.kernels.gemv import launch, split_k
    from engine.kernels.ops import add_rms_norm

    n = 200  # not a multiple of the tile
    x = torch.randn(t, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device) / k**0.5
    parts = torch.full((split_k(k, config[1], config[4])[1], t, n), float("nan"), device=device)
    launch(x, w, None, parts, config=config)
    assert parts.shape[0] == config[4]
    assert rel_err(parts.sum(0), torch.nn.functional.linear(x.double(), w.double())) < 1e-5
    whole = parts[0].clone()
    for part in parts[1:]:  # the reader's order: split by split, in float32
        whole += part
    residual = torch.randn(t, n, dtype=dtype, device=device)
    norm_w = 1 + 0.1 * torch.randn(n, dtype=dtype, device=device)
    stream = residual.clone()
    normed, _ = add_rms_norm(parts, stream, norm_w, 1e-6)
    expect_stream = residual.clone()
    expect, _ = add_rms_norm(whole.to(dtype), expect_stream, norm_w, 1e-6)
    assert torch.equal(stream, expect_stream)  # the partials' sum rounded once, then added
    # the norm's own sum of squares may be added in another order (the partials' launch has more
    # warps): a last-bit difference in its scale
    assert rel_err(normed, expect) < TOL[dtype] / 10


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [300, 5000, 151936])
def test_cross_entropy_grad_matches_torch(dtype, vocab, device):
    from engine.kernels.cross_entropy import cross_entropy_grad_

    g = torch.Generator().manual_seed(vocab)
    rows = 37
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dtype)
    targets = torch.randint(0, vocab, (rows,), generator=g)
    targets[:5] = logits[:5].float().argmax(dim=-1)  # some rows right, for the hits
    logits[5, 1], logits[5, vocab - 1] = 60.0, 60.0  # a tie far apart: the first is the argmax
    targets[5] = 1
    weights = torch.rand(rows, generator=g)
    ref = logits.double()
    ref_loss = weights.double() * (ref.logsumexp(-1) - ref.gather(1, targets[:, None]).squeeze(1))
    ref_grad = (ref.softmax(-1) - torch.nn.functional.one_hot(targets, vocab).double()) * weights.double()[:, None]
    work = logits.to(device)
    loss, hits = cross_entropy_grad_(work, targets.to(device), weights.to(device))
    assert rel_err(loss.cpu(), ref_loss) < 1e-5
    assert hits.cpu().tolist() == (ref.argmax(-1) == targets).tolist()
    assert rel_err(work.cpu(), ref_grad) < TOL[dtype]


def test_the_fused_training_loss_matches_the_torch_path_on_the_cpu(device):
    from engine.speculation.proposers.dflash.training.linear_loss import linear_cross_entropy

    g = torch.Generator().manual_seed(0)
    rows, h, vocab = 300, 64, 5000
    hidden = torch.randn(rows, h, generator=g)
    weight = torch.randn(vocab, h, generator=g) * 0.3
    targets = torch.randint(0, vocab, (rows,), generator=g)
    weights = torch.rand(rows, generator=g)
    out = {}
    for where in ("cpu", device):
        x = hidden.to(where).clone().requires_grad_()  # a leaf of its own on either device
        total, hits = linear_cross_entropy(x, weight.to(where), targets.to(where), weights.to(where), chunk_rows=128)
        total.backward()
        out[where] = (total.detach().cpu(), hits.cpu(), x.grad.cpu())
    (t_cpu, h_cpu, g_cpu), (t_gpu, h_gpu, g_gpu) = out["cpu"], out[device]
    assert rel_err(t_gpu, t_cpu) < 1e-5 and torch.equal(h_gpu, h_cpu)
    assert rel_err(g_gpu, g_cpu) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [300, 5000, 151936])
@pytest.mark.parametrize("settings", [(0.7, 20, 0.8), (1.0, 5, 1.0), (1.3, 8, 0.9), (0.5, 1, 1.0), (0.9, 64, 0.95)])
def test_the_fused_top_k_draw_is_torchs(dtype, vocab, settings, device, monkeypatch):
    """engine/kernels/sampling.py draws the token the torch ops of `sample` draw: rows of a
    verify step, a shared seed or each row's own, every noise stream, ties among the best logits."""
    from engine.runtime.sampling import DRAFT, TOKEN, SamplingParams, fused_top_k, sample

    temperature, top_k, top_p = settings
    g = torch.Generator().manual_seed(vocab + top_k)
    rows = 16
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dtype).to(device)
    # a tie at the top: the smaller index first, as in the whole-vocabulary order (a tie across
    # the k-th place is left open: which of the tied tokens torch's topk keeps is its own)
    logits[:, 3] = logits[:, 7] = logits.max(dim=-1).values + 1
    # one row whose best two are -0.0 and +0.0: torch's top-k on CUDA ranks +0.0 first (k = 1 keeps
    # it), its sort has them equal (top-p sums them in index order)
    logits[1] = -logits[1].abs() - 1
    logits[1, 11], logits[1, 12] = -0.0, 0.0
    positions = torch.arange(100, 100 + rows, device=device)
    seeds = torch.arange(rows, device=device) * 1_000_003 + 2**40
    for seed, row_seeds, noise in [(0, None, TOKEN), (1, None, TOKEN), (2**33 + 5, None, DRAFT), (1, seeds, TOKEN)]:
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        monkeypatch.setenv("SPECCHAT_FUSED_SAMPLING", "1")
        assert fused_top_k(logits, params)
        fused = sample(logits, positions, params, noise, row_seeds)
        monkeypatch.setenv("SPECCHAT_FUSED_SAMPLING", "0")
        ops = sample(logits, positions, params, noise, row_seeds)
        assert fused.tolist() == ops.tolist()


def test_the_fused_draw_inside_a_graph_follows_its_positions(device, monkeypatch):
    from engine.runtime.sampling import SamplingParams, sample

    monkeypatch.setenv("SPECCHAT_FUSED_SAMPLING", "1")
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=3)
    logits = torch.randn(4, 5000, device=device)
    positions = torch.arange(4, device=device)
    sample(logits, positions, params)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        drawn = sample(logits, positions, params)
    for start in (0, 50, 1000):
        positions.copy_(torch.arange(start, start + 4, device=device))
        graph.replay()
        want = sample(logits, positions.clone(), params)
        assert drawn.tolist() == want.tolist()
