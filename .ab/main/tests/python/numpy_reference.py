"""An independent NumPy float64 implementation of the MoE layer, written from the
spec (spec.hpp), to cross-check the C++ CPU reference: routing (softmax / grouped /
sigmoid+bias, top-k with ties to the lowest id, renormalize, scale), the gated
activations, routed and shared experts. Finite inputs only."""

from __future__ import annotations

import numpy as np

import moeforge


def _topk(keys: np.ndarray, k: int) -> np.ndarray:
    # Descending key, ties to the lowest index: a stable sort of -key.
    return np.argsort(-keys, kind="stable")[:k]


def route(spec: moeforge.MoeSpec, logits: np.ndarray, bias=None):
    logits = logits.astype(np.float64)
    T, E = logits.shape
    r = spec.routing
    kind = moeforge.enum_name(r.kind)
    ids = np.zeros((T, spec.topk), np.int64)
    wts = np.zeros((T, spec.topk), np.float64)
    for t in range(T):
        z = logits[t]
        if kind == "sigmoid-bias-grouped":
            weight = 1.0 / (1.0 + np.exp(-z))
            key = weight + (0.0 if bias is None else bias.astype(np.float64))
            contrib = key
        else:
            p = np.exp(z - z.max())
            weight = p / p.sum()
            key = z
            contrib = weight
        allowed = np.ones(E, bool)
        if kind != "softmax" and r.n_groups > 1:
            G, per = r.n_groups, E // r.n_groups
            scores = np.array([sum(contrib[g * per + i] for i in _topk(key[g * per:(g + 1) * per], r.group_score_topn))
                               for g in range(G)])
            allowed[:] = False
            for g in _topk(scores, r.topk_groups):
                allowed[g * per:(g + 1) * per] = True
        masked = np.where(allowed, key, -np.inf)
        sel = _topk(masked, spec.topk)
        w = weight[sel]
        if r.renormalize:
            w = w / w.sum()
        ids[t], wts[t] = sel, w * r.scaling_factor
    return ids, wts


def activate(spec: moeforge.MoeSpec, g: np.ndarray, u: np.ndarray) -> np.ndarray:
    a = spec.activation
    kind = moeforge.enum_name(a.kind)
    if kind == "swiglu":
        return g / (1.0 + np.exp(-g)) * u
    if kind == "geglu":
        return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3))) * u
    gc = np.minimum(g, a.limit)
    uc = np.clip(u, -a.limit, a.limit)
    return (uc + 1.0) * gc / (1.0 + np.exp(-a.alpha * gc))


def expert_out(spec, w: dict, x: np.ndarray) -> np.ndarray:
    I = w["w13"].shape[0] // 2
    h = x @ w["w13"].T
    if w["b13"] is not None:
        h = h + w["b13"].astype(np.float64)
    y = activate(spec, h[:, :I], h[:, I:]) @ w["w2"].T
    if w["b2"] is not None:
        y = y + w["b2"].astype(np.float64)
    return y


def forward(spec, weights: moeforge.Weights, x: np.ndarray, logits=None, topk_ids=None, topk_weights=None):
    x = x.astype(np.float64)
    if logits is not None:
        ids, wts = route(spec, logits, weights.correction_bias())
    else:
        ids, wts = topk_ids.astype(np.int64), topk_weights.astype(np.float64)
    out = np.zeros_like(x)
    for e in np.unique(ids):
        rows, slots = np.nonzero(ids == e)
        y = expert_out(spec, weights.expert(int(e)), x[rows])
        np.add.at(out, rows, wts[rows, slots][:, None] * y)
    for s in range(spec.num_shared_experts):
        out += expert_out(spec, weights.shared_expert(s), x)
    return out
