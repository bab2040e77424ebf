"""Training batches: the packed safetensors + manifest format, validation, micro-batching.

The batch arrives packed 1-D (docs/contracts.md). Micro-batches hold whole
samples, in one of two layouts:

- packed (`packing = true`, and `"auto"` on CUDA): the samples are concatenated into one [1, L] row with
  no padding and no attention mask. Position ids restart per sample, which
  transformers turns into a block-diagonal causal mask (sdpa, eager) or varlen
  attention (flash-attention), so attention never crosses samples.
- padded: one right-padded row per sample, [B, L], with an attention mask.
  It wastes (rows x longest - tokens) on padding; `"auto"` uses it on the CPU,
  where SDPA's math kernel makes a packed row slower, and it serves attention
  backends that do not read packed position ids.

- shared-prefix (`shared_prefix`, "auto": wherever the padded layout would be used with sdpa or
  eager attention): the samples in one [1, L] row as a prefix tree, a prefix several samples share
  (the episode's preamble, a group's prompt) computed once, with a 4-D attention mask.

All give the same logprobs and gradients (tested), so the layout is a speed
choice only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file, save_file

from .artifacts import ArtifactRef, path_to_uri, sha256_file, verify_file
from .store import S3Store, read_file_ref

BATCH_FORMAT = "ratchet.batch/v1"
_TENSORS = {
    "input_ids": torch.int32,
    "position_ids": torch.int32,
    "loss_mask": torch.uint8,
    "advantages": torch.float32,
    "inference_logprobs": torch.float32,
    "sample_offsets": torch.int64,
}
# Optional: [S] the trajectory each sample came from (0..K-1, non-decreasing). A
# trajectory whose chat template broke the multi-turn prefix arrives as several
# samples (segments); the loss weighs and ratios whole trajectories. Absent: one
# trajectory per sample.
_TRAJECTORY_INDEX = "trajectory_index"


class BatchError(ValueError):
    """A batch that does not fit the model or the contract; the trainer state is left unchanged."""


@dataclass
class Batch:
    input_ids: torch.Tensor  # [T] int64
    position_ids: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T] bool
    advantages: torch.Tensor  # [T] float32
    inference_logprobs: torch.Tensor  # [T] float32
    sample_offsets: torch.Tensor  # [S+1] int64
    manifest: dict[str, Any]
    trajectory_index: torch.Tensor | None = None  # [S] int64; None: one trajectory per sample
    # [T] float32: the proximal policy's logprobs (the trainer's, before the batch's first
    # update), set by the trainer when it makes several updates per batch; never on the wire.
    proximal_logprobs: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        return int(self.sample_offsets.numel() - 1)

    def trajectories(self) -> torch.Tensor:
        """[S] the trajectory of each sample (each sample its own when the batch says nothing)."""
        if self.trajectory_index is None:
            return torch.arange(self.num_samples, dtype=torch.long)
        return self.trajectory_index

    def trajectory_units(self) -> list[list[int]]:
        """Samples grouped by trajectory, in batch order: a micro-batch holds whole units."""
        units: list[list[int]] = []
        prev = None
        for i, t in enumerate(self.trajectories().tolist()):
            if t != prev:
                units.append([])
                prev = t
            units[-1].append(i)
        return units

    def sample_lengths(self) -> list[int]:
        return (self.sample_offsets[1:] - self.sample_offsets[:-1]).tolist()

    def subset(self, sample_ids: list[int]) -> "Batch":
        """The batch of these samples (in batch order), trajectories renumbered from 0: a mini-batch."""
        ids = sorted(sample_ids)
        off = self.sample_offsets.tolist()
        spans = [torch.arange(off[i], off[i + 1]) for i in ids]
        idx = torch.cat(spans) if spans else torch.zeros(0, dtype=torch.long)
        lengths = torch.tensor([off[i + 1] - off[i] for i in ids], dtype=torch.long)
        traj = None
        if self.trajectory_index is not None:
            _, traj = torch.unique_consecutive(self.trajectory_index[ids], return_inverse=True)
        return Batch(
            input_ids=self.input_ids[idx], position_ids=self.position_ids[idx], loss_mask=self.loss_mask[idx],
            advantages=self.advantages[idx], inference_logprobs=self.inference_logprobs[idx],
            sample_offsets=torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
            manifest=self.manifest, trajectory_index=traj,
            proximal_logprobs=self.proximal_logprobs[idx] if self.proximal_logprobs is not None else None,
        )


@dataclass
class MicroBatch:
    sample_ids: list[int]
    input_ids: torch.Tensor  # [B, L]
    position_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor | None  # [B, L] 1 = real token; None when packed
    sample_index: torch.Tensor  # [B, L] the batch sample each token belongs to, -1 on padding
    loss_mask: torch.Tensor  # [B, L] bool, predicts input_ids[:, t] from logits[:, t-1]
    advantages: torch.Tensor  # [B, L]
    inference_logprobs: torch.Tensor  # [B, L]
    proximal_logprobs: torch.Tensor | None = None  # [B, L], when the batch carries them
    # [B, L] each position's index into the batch's 1-D tensors (-1 on padding); set by the
    # shared-prefix layout, whose positions micro_batch_token_index cannot derive from the sample ids.
    token_index: torch.Tensor | None = None


def load_batch(batch_ref: ArtifactRef, manifest_ref: ArtifactRef, store: S3Store | None = None) -> Batch:
    """Reads and verifies a batch: from disk for file:// refs, from the run's S3 store for s3:// refs."""
    if batch_ref["uri"].startswith("s3://") or manifest_ref["uri"].startswith("s3://"):
        data = read_file_ref(batch_ref, "batch", store)
        mtext = read_file_ref(manifest_ref, "batch manifest", store).decode()
        tensors = load_safetensors_bytes(data)
    else:
        path = verify_file(batch_ref, "batch")
        mtext = verify_file(manifest_ref, "batch manifest").read_text()
        tensors = load_file(str(path))
    try:
        manifest = json.loads(mtext)
    except json.JSONDecodeError as e:
        raise BatchError(f"batch manifest {manifest_ref['uri']} is not JSON: {e}") from e
    return batch_from_tensors(tensors, manifest, source=batch_ref["uri"])


def batch_from_tensors(tensors: dict[str, torch.Tensor], manifest: dict[str, Any], source: str = "batch") -> Batch:
    if manifest.get("format") != BATCH_FORMAT:
        raise BatchError(f"{source}: manifest format is {manifest.get('format')!r}, expected {BATCH_FORMAT!r}")
    for name, dtype in _TENSORS.items():
        if name not in tensors:
            raise BatchError(f"{source}: tensor {name!r} is missing; the contract needs {sorted(_TENSORS)}")
        t = tensors[name]
        if t.dtype != dtype or t.dim() != 1:
            raise BatchError(f"{source}: tensor {name!r} is {t.dtype} with shape {list(t.shape)}, expected 1-D {dtype}")
    T = tensors["input_ids"].numel()
    for name in ("position_ids", "loss_mask", "advantages", "inference_logprobs"):
        if tensors[name].numel() != T:
            raise BatchError(f"{source}: tensor {name!r} has {tensors[name].numel()} entries, input_ids has {T}")
    off = tensors["sample_offsets"]
    if off.numel() < 2 or off[0] != 0 or off[-1] != T or bool((off[1:] <= off[:-1]).any()):
        raise BatchError(f"{source}: sample_offsets must rise strictly from 0 to {T} (total tokens); got {off.tolist()[:8]}...")
    mask = tensors["loss_mask"].bool()
    if bool(mask[off[:-1]].any()):
        raise BatchError(f"{source}: the first token of a sample is marked trainable; it has no context to be predicted from")
    traj = tensors.get(_TRAJECTORY_INDEX)
    if traj is not None:
        S = off.numel() - 1
        if traj.dtype != torch.int64 or traj.dim() != 1 or traj.numel() != S:
            raise BatchError(f"{source}: tensor {_TRAJECTORY_INDEX!r} is {traj.dtype} with shape {list(traj.shape)}, "
                             f"expected 1-D int64 with one entry per sample ({S})")
        steps = traj[1:] - traj[:-1]
        if S and (int(traj[0]) != 0 or bool(((steps != 0) & (steps != 1)).any())):
            raise BatchError(f"{source}: {_TRAJECTORY_INDEX} must start at 0 and rise by 0 or 1 from one sample to the next "
                             f"(a trajectory's segments are adjacent); got {traj.tolist()[:8]}...")
    return Batch(
        input_ids=tensors["input_ids"].long(),
        position_ids=tensors["position_ids"].long(),
        loss_mask=mask,
        advantages=tensors["advantages"].float(),
        inference_logprobs=tensors["inference_logprobs"].float(),
        sample_offsets=off.long(),
        manifest=manifest,
        trajectory_index=traj.long() if traj is not None else None,
    )


def check_batch_fits(batch: Batch, vocab_size: int, seq_len: int, run_id: str | None = None, step: int | None = None) -> None:
    """Reject a batch the model cannot take, before any state changes."""
    m = batch.manifest
    if run_id is not None and m.get("run_id") not in (None, run_id):
        raise BatchError(f"batch manifest is for run {m.get('run_id')!r}, this step is for run {run_id!r}")
    if step is not None and m.get("step") not in (None, step):
        raise BatchError(f"batch manifest is for step {m.get('step')!r}, this activity applies step {step}")
    mv = m.get("vocab_size")
    if isinstance(mv, int) and mv > vocab_size:
        raise BatchError(f"batch manifest vocab_size {mv} exceeds the model's vocab_size {vocab_size}: the batch was tokenized for another model")
    if batch.input_ids.numel():
        hi, lo = int(batch.input_ids.max()), int(batch.input_ids.min())
        if hi >= vocab_size or lo < 0:
            bad = hi if hi >= vocab_size else lo
            raise BatchError(f"batch input_ids holds token id {bad}, outside the model's vocabulary [0, {vocab_size}): "
                             "the batch was tokenized for another model")
    longest = max(batch.sample_lengths())
    if longest > seq_len:
        raise BatchError(f"a batch sample has {longest} tokens, longer than trainer_config.seq_len={seq_len}. "
                         "Fix: truncate in the batch builder or raise seq_len")


def plan_micro_batches(lengths: list[int], token_budget: int, units: list[list[int]] | None = None) -> list[list[int]]:
    """Padded layout: group whole samples, in order, so that rows * longest row <= token_budget.

    `units` (default: each sample alone) are never split across micro-batches: a
    trajectory's segments share GSPO's sequence ratio. Order is kept so that a
    step's arithmetic (and so its result) depends only on the batch and the
    budget, never on timing.
    """
    units = units if units is not None else [[i] for i in range(len(lengths))]
    groups: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for u in units:
        new_max = max([cur_max] + [lengths[i] for i in u])
        if cur and new_max * (len(cur) + len(u)) > token_budget:
            groups.append(cur)
            cur, new_max = [], max(lengths[i] for i in u)
        cur.extend(u)
        cur_max = new_max
    if cur:
        groups.append(cur)
    return groups


def plan_packed_micro_batches(lengths: list[int], token_budget: int, units: list[list[int]] | None = None) -> list[list[int]]:
    """Packed layout: first-fit decreasing of whole samples into rows of <= token_budget tokens.

    A sample (or unit: a trajectory's segments, kept together) longer than the
    budget gets a row of its own. Deterministic (ties broken by sample index) and
    each row lists its samples in batch order, so a step's result depends only on
    the batch and the budget.
    """
    units = units if units is not None else [[i] for i in range(len(lengths))]
    size = [sum(lengths[i] for i in u) for u in units]
    order = sorted(range(len(units)), key=lambda k: (-size[k], units[k][0]))
    rows: list[list[int]] = []
    free: list[int] = []
    for k in order:
        n = size[k]
        for r, room in enumerate(free):
            if n <= room:
                rows[r].extend(units[k])
                free[r] -= n
                break
        else:
            rows.append(list(units[k]))
            free.append(max(token_budget - n, 0))
    rows = [sorted(r) for r in rows]
    rows.sort(key=lambda r: r[0])
    return rows


def make_packed_micro_batch(batch: Batch, sample_ids: list[int], device: torch.device) -> MicroBatch:
    off = batch.sample_offsets.tolist()
    spans = [(off[i], off[i + 1]) for i in sample_ids]

    def cat(src: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return torch.cat([src[s:e] for s, e in spans]).to(dtype)[None].to(device)

    index = torch.cat([torch.full((e - s,), i, dtype=torch.long) for i, (s, e) in zip(sample_ids, spans)])
    return MicroBatch(
        sample_ids=list(sample_ids),
        input_ids=cat(batch.input_ids, torch.long),
        position_ids=cat(batch.position_ids, torch.long),
        attention_mask=None,
        sample_index=index[None].to(device),
        loss_mask=cat(batch.loss_mask, torch.bool),
        advantages=cat(batch.advantages, torch.float32),
        inference_logprobs=cat(batch.inference_logprobs, torch.float32),
        proximal_logprobs=cat(batch.proximal_logprobs, torch.float32) if batch.proximal_logprobs is not None else None,
    )


def micro_batch_token_index(batch: Batch, sample_ids: list[int], packed: bool) -> torch.Tensor:
    """[B, L] each micro-batch position's index into the batch's 1-D tensors (-1 on padding),
    in the layout make_packed_micro_batch / make_micro_batch build for these samples."""
    off = batch.sample_offsets.tolist()
    if packed:
        return torch.cat([torch.arange(off[i], off[i + 1]) for i in sample_ids])[None]
    L = max(off[i + 1] - off[i] for i in sample_ids)
    out = torch.full((len(sample_ids), L), -1, dtype=torch.long)
    for r, i in enumerate(sample_ids):
        out[r, : off[i + 1] - off[i]] = torch.arange(off[i], off[i + 1])
    return out


def make_micro_batch(batch: Batch, sample_ids: list[int], device: torch.device, pad_id: int = 0) -> MicroBatch:
    """Padded layout: one right-padded row per sample."""
    off = batch.sample_offsets.tolist()
    L = max(off[i + 1] - off[i] for i in sample_ids)
    B = len(sample_ids)

    def pad(src: torch.Tensor, fill: float | int, dtype: torch.dtype) -> torch.Tensor:
        out = torch.full((B, L), fill, dtype=dtype)
        for r, i in enumerate(sample_ids):
            s, e = off[i], off[i + 1]
            out[r, : e - s] = src[s:e]
        return out.to(device)

    attn = torch.zeros((B, L), dtype=torch.long)
    index = torch.full((B, L), -1, dtype=torch.long)
    for r, i in enumerate(sample_ids):
        attn[r, : off[i + 1] - off[i]] = 1
        index[r, : off[i + 1] - off[i]] = i
    return MicroBatch(
        sample_ids=list(sample_ids),
        input_ids=pad(batch.input_ids, pad_id, torch.long),
        position_ids=pad(batch.position_ids, 0, torch.long),
        attention_mask=attn.to(device),
        sample_index=index.to(device),
        loss_mask=pad(batch.loss_mask, False, torch.bool),
        advantages=pad(batch.advantages, 0.0, torch.float32),
        inference_logprobs=pad(batch.inference_logprobs, 0.0, torch.float32),
        proximal_logprobs=pad(batch.proximal_logprobs, 0.0, torch.float32) if batch.proximal_logprobs is not None else None,
    )


# -- shared-prefix layout ---------------------------------------------------------------------------
#
# The samples of a step share long token prefixes: every episode opens with the same system prompt
# and worked example, and a group's rollouts with the same task prompt. The shared-prefix layout lays
# a micro-batch's samples out as a prefix tree in one row: a prefix common to several samples is
# computed once, each continuation attends to its ancestors' tokens and causally to its own (a 4-D
# attention mask), with the sample's own position ids. Every token then sees exactly the context it
# has in its own sample, so logprobs and the loss are the unshared computation's, and the gradient
# reaches a shared prefix once, summed over its continuations (tested against the padded layout).
#
# A node boundary never falls where a trainable token would be predicted across it: the loss reads
# logits[r - 1] for the token at row position r, so a trainable token and its predecessor are always
# adjacent in the row. Shared nodes hold no trainable token (each sample has its own advantage).


def _first_true_after(mask: torch.Tensor, start: int) -> int:
    """Index of the first True in mask after `start`, or mask's length."""
    hit = mask[start + 1:].nonzero()
    return start + 1 + int(hit[0]) if hit.numel() else int(mask.numel())


def shared_prefix_tree(batch: Batch, sample_ids: list[int]) -> tuple[list[int], dict[int, list[int]]]:
    """The prefix-tree row of these samples: `src`, the batch's flat index of each row position
    (a shared position: the first sample's token), and for each sample the row position of each of
    its tokens. Nodes in depth-first order, children in batch order; deterministic."""
    off = batch.sample_offsets.tolist()
    src: list[int] = []
    rows: dict[int, list[int]] = {i: [] for i in sample_ids}

    def emit(owner: int, members: list[int], start: int, end: int) -> None:
        r0 = len(src)
        src.extend(range(off[owner] + start, off[owner] + end))
        for i in members:
            rows[i].extend(range(r0, r0 + end - start))

    def build(members: list[int], start: int) -> None:
        # Invariant: the members share tokens [0, start), and none has a trainable token at `start`.
        if len(members) == 1:
            i = members[0]
            emit(i, members, start, off[i + 1] - off[i])
            return
        lengths = [off[i + 1] - off[i] for i in members]
        m = min(lengths)
        first = members[0]
        common = m
        for i in members[1:]:
            a = slice(off[first] + start, off[first] + m)
            b = slice(off[i] + start, off[i] + m)
            diff = ((batch.input_ids[a] != batch.input_ids[b]) | (batch.position_ids[a] != batch.position_ids[b])).nonzero()
            if diff.numel():
                common = min(common, start + int(diff[0]))
        trainable = min(_first_true_after(batch.loss_mask[off[i]: off[i + 1]], start) for i in members)
        # The shared node is [start, end): identical tokens, no trainable token after `start` up to and
        # including `end` (where the children start), and every member keeps a token of its own.
        end = min(common, trainable - 1, m - 1)
        if end > start:
            emit(first, members, start, end)
            start = end
        # Children: members that agree on the token at `start` may share further.
        parts: dict[tuple[int, int], list[int]] = {}
        for i in members:
            key = (int(batch.input_ids[off[i] + start]), int(batch.position_ids[off[i] + start]))
            parts.setdefault(key, []).append(i)
        if end <= start and len(parts) == 1:  # nothing more can be shared here
            for i in members:
                build([i], start)
            return
        for part in sorted(parts.values(), key=lambda p: p[0]):
            build(part, start)

    build(sorted(sample_ids), 0)
    return src, rows


def shared_prefix_length(batch: Batch, sample_ids: list[int]) -> int:
    """Tokens the shared-prefix row of these samples computes."""
    return len(shared_prefix_tree(batch, sample_ids)[0])


def plan_shared_micro_batches(batch: Batch, sample_ids: list[int], token_budget: int,
                              units: list[list[int]] | None = None) -> list[list[int]]:
    """Shared-prefix layout: whole units (default: each sample) in batch order fill a row while its
    prefix tree has at most token_budget tokens (a unit longer than the budget gets a row alone).
    Returns the micro-batches as lists of the given sample ids."""
    units = units if units is not None else [[i] for i in sample_ids]
    groups: list[list[int]] = []
    cur: list[int] = []
    for u in units:
        if cur and shared_prefix_length(batch, cur + u) > token_budget:
            groups.append(cur)
            cur = []
        cur = cur + list(u)
    if cur:
        groups.append(cur)
    return groups


def make_shared_micro_batch(batch: Batch, sample_ids: list[int], device: torch.device) -> MicroBatch:
    """One [1, L] row: the samples' prefix tree, with a [1, 1, L, L] boolean attention mask (True: attend)."""
    src, rows = shared_prefix_tree(batch, sample_ids)
    L = len(src)
    idx = torch.tensor(src, dtype=torch.long)
    allowed = torch.zeros((L, L), dtype=torch.bool)
    off = batch.sample_offsets.tolist()
    for i in sample_ids:
        p = torch.tensor(rows[i], dtype=torch.long)
        n = p.numel()
        allowed[p[:, None], p[None, :]] |= torch.ones((n, n), dtype=torch.bool).tril()
        mask = batch.loss_mask[off[i]: off[i + 1]]
        # A trainable token's predecessor is the row position just before it (the loss reads logits[r - 1]).
        if bool((mask[1:] & (p[1:] != p[:-1] + 1)).any()):
            raise AssertionError(f"shared-prefix layout split sample {i} at a trainable token")

    def take(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return t[idx].to(dtype)[None].to(device)

    # Positions no trainable token owns (prompts, tool output, shared nodes) hold the sample that
    # laid them out; the loss only reads sample_index where loss_mask is set, and there it is unique.
    sample_of = torch.bucketize(idx, torch.tensor(off[1:], dtype=torch.long), right=True)
    return MicroBatch(
        sample_ids=list(sample_ids),
        input_ids=take(batch.input_ids, torch.long),
        position_ids=take(batch.position_ids, torch.long),
        attention_mask=allowed[None, None].to(device),
        sample_index=sample_of[None].to(device),
        loss_mask=take(batch.loss_mask, torch.bool),
        advantages=take(batch.advantages, torch.float32),
        inference_logprobs=take(batch.inference_logprobs, torch.float32),
        proximal_logprobs=take(batch.proximal_logprobs, torch.float32) if batch.proximal_logprobs is not None else None,
        token_index=idx[None],
    )


def write_batch(directory: Path, name: str, samples: list[dict[str, Any]], manifest: dict[str, Any]) -> tuple[ArtifactRef, ArtifactRef]:
    """Pack samples into the contract's format (tests, benchmarks, fixtures).

    Each sample: input_ids, loss_mask, advantage (float), inference_logprobs (list, same length),
    and optionally trajectory (int: samples of one trajectory are adjacent and share it).
    """
    ids, pos, mask, adv, lp, offsets = [], [], [], [], [], [0]
    for s in samples:
        n = len(s["input_ids"])
        ids += list(s["input_ids"])
        pos += list(range(n))
        mask += [int(x) for x in s["loss_mask"]]
        adv += [float(s["advantage"]) if m else 0.0 for m in s["loss_mask"]]
        lp += [float(x) if m else 0.0 for x, m in zip(s["inference_logprobs"], s["loss_mask"])]
        offsets.append(offsets[-1] + n)
    tensors = {
        "input_ids": torch.tensor(ids, dtype=torch.int32),
        "position_ids": torch.tensor(pos, dtype=torch.int32),
        "loss_mask": torch.tensor(mask, dtype=torch.uint8),
        "advantages": torch.tensor(adv, dtype=torch.float32),
        "inference_logprobs": torch.tensor(lp, dtype=torch.float32),
        "sample_offsets": torch.tensor(offsets, dtype=torch.int64),
    }
    if any("trajectory" in s for s in samples):
        tensors[_TRAJECTORY_INDEX] = torch.tensor([int(s["trajectory"]) for s in samples], dtype=torch.int64)
    directory.mkdir(parents=True, exist_ok=True)
    bpath, mpath = directory / f"{name}.safetensors", directory / f"{name}.json"
    save_file(tensors, str(bpath))
    mpath.write_text(json.dumps({"format": BATCH_FORMAT, **manifest}))
    refs = []
    for p in (bpath, mpath):
        refs.append({"uri": path_to_uri(p), "sha256": sha256_file(p), "bytes": p.stat().st_size})
    return refs[0], refs[1]  # type: ignore[return-value]
