"""Attention over a shared-prefix row (batch.py) on the CPU, without its [L, L] mask.

A prefix-tree row's mask lets each node's tokens see their ancestors' tokens whole and their own
causally. PyTorch's CPU flash kernel does not skip masked blocks, so the masked row cost L^2 (about
70% of a main-job trainer step). Here each node attends to each ancestor range with no mask and to
itself with `is_causal` (which does skip blocks); the parts are merged by their logsumexps, as
split-KV attention does. Backward calls the kernel's own backward on each part with the merged
output and logsumexp, which gives exactly the joint softmax's gradient for that part's keys.
Same numbers as the masked attention up to float rounding (tests/test_shared_prefix.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NAME = "ratchet_tree_sdpa"  # the attention implementation a shared-prefix model runs with on the CPU

_fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


@dataclass(frozen=True)
class TreeNode:
    """Row positions [start, end) and the row ranges of its ancestors' tokens, root first."""
    start: int
    end: int
    ancestors: tuple[tuple[int, int], ...]

    def parts(self) -> list[tuple[int, int, bool]]:
        """(key start, key end, causal) of each attention part: ancestors whole, then itself causally."""
        return [(a, b, False) for a, b in self.ancestors] + [(self.start, self.end, True)]


def tree_nodes(rows: dict[int, list[int]], length: int) -> tuple[TreeNode, ...]:
    """The nodes of a prefix-tree row from each sample's row positions (shared_prefix_tree): a node is a
    maximal run of consecutive positions laid out for the same samples (their paths agree up to it, so
    its ancestors are the positions before it on any member's path, as runs)."""
    owners: list[frozenset[int]] = [frozenset()] * length
    for i, pos in rows.items():
        for p in pos:
            owners[p] = owners[p] | {i}
    nodes: list[TreeNode] = []
    start = 0
    for r in range(1, length + 1):
        if r < length and owners[r] == owners[start]:
            continue
        ranges: list[tuple[int, int]] = []
        for p in rows[min(owners[start])]:
            if p >= start:
                break
            if ranges and ranges[-1][1] == p:
                ranges[-1] = (ranges[-1][0], p + 1)
            else:
                ranges.append((p, p + 1))
        nodes.append(TreeNode(start, r, tuple(ranges)))
        start = r
    return tuple(nodes)


class _TreeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, nodes, scale):  # type: ignore[override]
        # q, k, v: [B, H, L, D] (keys and values already repeated to the query heads).
        out = torch.empty_like(q)
        lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        for node in nodes:
            qs = q[:, :, node.start: node.end]
            o_acc = l_acc = None
            for a, b, causal in node.parts():
                o, l = _fwd(qs, k[:, :, a:b], v[:, :, a:b], 0.0, causal, scale=scale)
                if o_acc is None:
                    o_acc, l_acc = o.float(), l
                    continue
                new = torch.logaddexp(l_acc, l)
                o_acc = o_acc * (l_acc - new).exp()[..., None] + o.float() * (l - new).exp()[..., None]
                l_acc = new
            out[:, :, node.start: node.end] = o_acc.to(q.dtype)
            lse[:, :, node.start: node.end] = l_acc
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.nodes, ctx.scale = nodes, scale
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dout = dout.contiguous()
        for node in ctx.nodes:
            s, e = node.start, node.end
            for a, b, causal in node.parts():
                gq, gk, gv = _bwd(dout[:, :, s:e], q[:, :, s:e], k[:, :, a:b], v[:, :, a:b], out[:, :, s:e],
                                  lse[:, :, s:e], 0.0, causal, scale=ctx.scale)
                dq[:, :, s:e] += gq
                dk[:, :, a:b] += gk
                dv[:, :, a:b] += gv
        return dq, dk, dv, None, None


def tree_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, nodes: tuple[TreeNode, ...],
                   scale: float | None = None) -> torch.Tensor:
    """[B, H, L, D] attention of a prefix-tree row (k, v with as many heads as q)."""
    return _TreeAttention.apply(q, k, v, nodes, scale)


def tree_sdpa_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                      tree_nodes: tuple[TreeNode, ...] | None = None, **kwargs):
    """transformers' attention interface: the tree path where the forward carries `tree_nodes`,
    transformers' own sdpa everywhere else (padded rows, the reference model, tests' helpers)."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    if tree_nodes is None or dropout:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    out = tree_attention(query, repeat_kv(key, groups), repeat_kv(value, groups), tree_nodes, scaling)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make NAME a transformers attention implementation (with sdpa's mask), once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, tree_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
