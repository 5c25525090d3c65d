"""A plain-PyTorch MoE layer (float32 on the GPU), written from spec.hpp, for comparisons."""

import torch

import moeforge


def expert_tensors(weights, e, device, shared=False):
    w = weights.shared_expert(e) if shared else weights.expert(e)
    return (torch.from_numpy(w["w13"]).float().to(device), torch.from_numpy(w["w2"]).float().to(device))


def route_softmax(spec, logits, k):
    p = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(p, k, dim=-1)
    if spec.routing.renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return ids, w * spec.routing.scaling_factor


def swiglu_expert(x, w13, w2):
    I = w13.shape[0] // 2
    h = x @ w13.t()
    return (torch.nn.functional.silu(h[:, :I]) * h[:, I:]) @ w2.t()


def forward(spec, weights, x, logits=None, topk_ids=None, topk_weights=None):
    assert moeforge.enum_name(spec.routing.kind) == "softmax" and moeforge.enum_name(spec.activation.kind) == "swiglu"
    xf = x.float()
    if logits is not None:
        ids, wts = route_softmax(spec, logits, spec.topk)
    else:
        ids, wts = topk_ids.long(), topk_weights.float()
    out = torch.zeros_like(xf)
    for e in torch.unique(ids).tolist():
        rows, slots = torch.nonzero(ids == e, as_tuple=True)
        w13, w2 = expert_tensors(weights, e, x.device)
        out.index_add_(0, rows, wts[rows, slots][:, None] * swiglu_expert(xf[rows], w13, w2))
    for s in range(spec.num_shared_experts):
        w13, w2 = expert_tensors(weights, s, x.device, shared=True)
        out += swiglu_expert(xf, w13, w2)
    return out


def rel(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))
