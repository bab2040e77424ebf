"""fp32 master weights for trainable parameters that compute in a low precision (bf16 LoRA).

peft keeps adapters in fp32, so every adapted projection casts its bf16 input
to fp32 and runs the adapter matmuls in fp32: memory and bandwidth on seven
projections per layer. Here the model computes with bf16 copies of the adapter,
and the optimiser steps fp32 masters:

- each bf16 gradient is added into its master's fp32 `.grad` as soon as it is
  accumulated (a post-accumulate-grad hook), so micro-batches sum in fp32;
- after the optimiser step the masters are rounded into the bf16 copies;
- checkpoints read and write the masters (`masters_in_place()`), so a resume
  is exact and the saved adapter is fp32 as before.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


class MasterWeights:
    def __init__(self, params: list[torch.nn.Parameter], compute_dtype: torch.dtype):
        self.params = params
        self.compute_dtype = compute_dtype
        # Masters take the fp32 values the adapter was initialised with, before rounding.
        self.masters = [torch.nn.Parameter(p.detach().float().clone()) for p in params]
        self._compute = [p.detach().to(compute_dtype) for p in params]
        for p, c in zip(params, self._compute):
            p.data = c
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(m)) for p, m in zip(params, self.masters)]

    @staticmethod
    def _hook(master: torch.nn.Parameter):
        def accumulate(p: torch.Tensor) -> None:
            g = p.grad.float()
            master.grad = g if master.grad is None else master.grad.add_(g)
            p.grad = None  # the bf16 gradient is not kept: the fp32 sum is

        return accumulate

    @torch.no_grad()
    def sync(self) -> None:
        """Round the masters into the compute copies (after every optimiser step)."""
        for c, m in zip(self._compute, self.masters):
            c.copy_(m)

    @contextlib.contextmanager
    def masters_in_place(self) -> Iterator[None]:
        """The model's parameters are the fp32 masters inside; checkpoint reads/writes go to them."""
        for p, m in zip(self.params, self.masters):
            p.data = m.data
        try:
            yield
        finally:
            for p, c in zip(self.params, self._compute):
                p.data = c
            self.sync()

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
