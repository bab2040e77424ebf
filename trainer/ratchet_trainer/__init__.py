"""Ratchet's trainer: GRPO-family losses on LoRA or full models; a Temporal activity worker around a Temporal-free core."""
