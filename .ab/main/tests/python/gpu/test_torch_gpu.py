"""moeforge with torch CUDA tensors: the layer, the torch.library op under CUDA graphs
and torch.compile, fused_experts, against the CPU reference and plain PyTorch."""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


import moeforge  # noqa: E402
import moeforge.torch as mt  # noqa: E402
import torch_reference as tref  # noqa: E402
from moeforge import _core  # noqa: E402

DEV = torch.device("cuda", 0)


def gpu_spec(**kw):
    base = dict(name="gpu-small", num_experts=16, hidden=512, intermediate=256, topk=4, num_shared_experts=1,
                shared_intermediate=256)
    base.update(kw)
    return moeforge.MoeSpec(**base)


@pytest.fixture(scope="module")
def layer():
    return moeforge.MoeLayer(gpu_spec(), backend="auto", device=0, seed=5)


def make_inputs(spec, T, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(T, spec.hidden, generator=g).to(torch.bfloat16).to(DEV)
    logits = (2 * torch.randn(T, spec.num_experts, generator=g)).to(DEV)
    return x, logits


def test_auto_picks_a_gpu_backend(layer):
    assert layer.backend != "cpu", layer.backend_reason
    assert layer.device == ("cuda", 0)


@pytest.mark.parametrize("T", [1, 7, 64, 300])
def test_cuda_tensors_vs_cpu_reference(layer, T):
    spec = layer.spec
    x, logits = make_inputs(spec, T, seed=T)
    out = torch.full_like(x, float("nan"))
    got = layer(x, logits, out=out)
    assert got is out
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    ref = _core._reference_forward(spec, layer.weights, x.cpu(), logits.cpu())
    assert tref.rel(out.cpu(), torch.from_numpy(ref)) < 1e-2
    fresh = layer(x, logits)
    assert fresh.is_cuda and fresh.dtype == torch.bfloat16 and fresh.shape == x.shape
    assert torch.equal(fresh, out)  # deterministic


@pytest.mark.parametrize("weights", ["bf16", "fp8", "nvfp4", "mxfp4"])
def test_every_weight_format_on_the_auto_backend(weights):
    # auto takes sm90 on sm_90a for bf16 and nvfp4 (W4A16), the portable backend otherwise;
    # whichever it is must match the CPU reference on the dequantized weights.
    spec = gpu_spec(weight_format=weights)
    lay = moeforge.MoeLayer(spec, backend="auto", device=0, seed=9)
    on_sm90a = torch.cuda.get_device_capability(0) == (9, 0)
    if on_sm90a and weights in ("bf16", "nvfp4"):
        assert lay.backend == "sm90", lay.backend_reason
    assert lay.backend != "cpu", lay.backend_reason
    for T in (3, 200):
        x, logits = make_inputs(spec, T, seed=100 + T)
        out = lay(x, logits)
        ref = _core._reference_forward(spec, lay.weights, x.cpu(), logits.cpu())
        assert tref.rel(out.cpu(), torch.from_numpy(ref)) < 1e-2, (weights, lay.backend, T)


def test_vs_plain_pytorch(layer):
    spec = layer.spec
    x, logits = make_inputs(spec, 96, seed=11)
    out = layer(x, logits)
    ref = tref.forward(spec, layer.weights, x, logits)
    assert tref.rel(out, ref) < 1e-2


def test_topk_path_int32_int64(layer):
    spec = layer.spec
    x, logits = make_inputs(spec, 40, seed=3)
    ids, wts = tref.route_softmax(spec, logits, spec.topk)
    a = layer(x, topk_ids=ids.to(torch.int32).contiguous(), topk_weights=wts.float().contiguous())
    b = layer(x, topk_ids=ids.contiguous(), topk_weights=wts.float().contiguous())
    assert torch.equal(a, b)
    assert tref.rel(a, tref.forward(spec, layer.weights, x, topk_ids=ids, topk_weights=wts)) < 1e-2


def test_runs_on_the_current_stream(layer):
    spec = layer.spec
    x, logits = make_inputs(spec, 128, seed=4)
    expected = layer(x, logits)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = layer(x, logits)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert torch.equal(got, expected)


def test_cpu_tensor_for_gpu_layer_names_the_argument(layer):
    x, logits = make_inputs(layer.spec, 4, seed=1)
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        layer(x.cpu(), logits.cpu())
    assert e.value.argument == "x"
    with pytest.raises(moeforge.InvalidArgumentError) as e:
        layer(x, logits.cpu())
    assert e.value.argument == "router_logits"


def test_op_fake_and_schema(layer):
    module = mt.MoeModule(layer)
    x, logits = make_inputs(layer.spec, 8, seed=2)
    torch.library.opcheck(torch.ops.moeforge.moe_forward.default, (x, logits, None, None, module.handle),
                          test_utils=("test_schema", "test_faketensor"))


def test_cuda_graph_capture_replay_equals_eager(layer):
    module = mt.MoeModule(layer)
    spec = layer.spec
    x_static, logits_static = make_inputs(spec, 64, seed=20)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (kernels compiled and loaded)
        for _ in range(2):
            module(x_static, logits_static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = module(x_static, logits_static)
    for seed in (21, 22, 23):
        x, logits = make_inputs(spec, 64, seed=seed)
        x_static.copy_(x)
        logits_static.copy_(logits)
        graph.replay()
        eager = module(x, logits)
        torch.cuda.synchronize()
        assert torch.equal(y_static, eager), seed


def test_torch_compile_module_calling_the_op(layer):
    spec = layer.spec

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.moe = mt.MoeModule(layer)

        def forward(self, x, logits):
            return self.moe(x, logits) + x

    block = Block()
    compiled = torch.compile(block, fullgraph=True)
    for T in (16, 33):
        x, logits = make_inputs(spec, T, seed=T)
        assert torch.equal(compiled(x, logits), block(x, logits))


def test_fused_experts_vs_plain_pytorch():
    E, H, I, T, k = 8, 256, 128, 50, 2
    g = torch.Generator(device="cpu").manual_seed(0)
    w1 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(torch.bfloat16).to(DEV)
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).to(torch.bfloat16).to(DEV)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16).to(DEV)
    logits = torch.randn(T, E, generator=g).to(DEV)
    wts, ids = torch.topk(torch.softmax(logits, -1), k)
    wts = wts / wts.sum(-1, keepdim=True)
    ids = ids.to(torch.int32)
    out = mt.fused_experts(x, w1, w2, wts, ids)
    # Plain PyTorch with vLLM's convention: gate = w1[e, :I], up = w1[e, I:].
    ref = torch.zeros(T, H, device=DEV)
    for t in range(T):
        for j in range(k):
            e = int(ids[t, j])
            h = x[t].float() @ w1[e].float().t()
            ref[t] += wts[t, j] * ((torch.nn.functional.silu(h[:I]) * h[I:]) @ w2[e].float().t())
    assert tref.rel(out, ref) < 1e-2
    n = len(mt._cache)
    again = mt.fused_experts(x, w1, w2, wts, ids)
    assert len(mt._cache) == n and torch.equal(again, out)  # cached by tensor identity
    y = x.clone()
    assert mt.fused_experts(y, w1, w2, wts, ids, inplace=True) is y and torch.equal(y, out)
    with pytest.raises(NotImplementedError):
        mt.fused_experts(x, w1, w2, wts, ids, use_fp8_w8a8=True)
    mt.clear_fused_experts_cache()


def test_readme_example():
    import moeforge, torch  # noqa: E401,F811
    spec = moeforge.MoeSpec(num_experts=8, hidden=256, intermediate=128, topk=2)
    layer = moeforge.MoeLayer(spec, seed=0)  # "auto": the preferred backend whose self-test passes here
    x, logits = torch.randn(4, 256, dtype=torch.bfloat16, device="cuda"), torch.randn(4, 8, device="cuda")
    y = layer(x, logits)
    print(layer.backend, y.shape, y.dtype)
    assert y.shape == (4, 256) and y.is_cuda and torch.isfinite(y).all()
    ref = _core._reference_forward(spec, layer.weights, x.cpu(), logits.cpu())
    assert tref.rel(y.cpu(), torch.from_numpy(ref)) < 1e-2
