import type { RunConfig } from '../config/schema';

/**
 * The run config's [trainer] section in the shape the Python trainer validates
 * (trainer/ratchet_trainer/core/config.py: parse_trainer_config). Pure, so the
 * workflow computes it and the history shows exactly what the trainer got.
 */
export function toTrainerConfig(config: RunConfig): Record<string, unknown> {
  const t = config.trainer;
  return {
    model: {
      path: config.model.path,
      ac: { freq: t.ac.freq },
      lora: t.mode === 'lora'
        ? { rank: t.lora.rank, alpha: t.lora.alpha, dropout: t.lora.dropout, target_modules: [...t.lora.target_modules] }
        : null,
    },
    optim: { lr: t.optim.lr, weight_decay: t.optim.weight_decay, max_grad_norm: t.optim.max_grad_norm },
    loss: {
      type: t.loss.kind,
      // Unset: the trainer picks the loss's own range (GSPO's is ~1000x narrower than PPO's).
      ...(t.loss.eps_low !== undefined ? { eps_low: t.loss.eps_low } : {}),
      ...(t.loss.eps_high !== undefined ? { eps_high: t.loss.eps_high } : {}),
      normalization: t.loss.normalization === 'sequence' ? 'sequence_mean' : t.loss.normalization,
      kl_coef: t.loss.kl_coef,
      // The trainer scores the distribution vLLM sampled from: logits / T.
      temperature: config.sampling.temperature,
      correction: t.loss.correction,
      tis_cap: t.loss.tis_cap,
      mask_threshold: t.loss.mask_threshold,
      dual_clip: t.loss.dual_clip,
      // Sent only where they act, so a default config's payload is what it was.
      ...(t.loss.correction === 'icepop' ? { icepop_low: t.loss.icepop_low, icepop_high: t.loss.icepop_high } : {}),
    },
    seq_len: config.orchestrator.seq_len,
    ...(t.minibatches !== 1 ? { minibatches: t.minibatches } : {}),
    ...(t.epochs !== 1 ? { epochs: t.epochs } : {}),
    micro_batch_tokens: t.micro_batch_tokens,
    packing: t.packing,
    device: t.device,
    seed: t.seed,
  };
}
