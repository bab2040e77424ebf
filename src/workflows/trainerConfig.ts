import type { RunConfig } from '../config/schema';

/**
 * The trainer_config payload of trainer.load: the run config's [trainer] section as it is
 * (its keys are the trainer's: trainer/ratchet_trainer/core/config.py, checked by
 * test/unit/config/schema.test.ts), plus what other sections own: the model's
 * weights, the longest sample and the sampling temperature (the trainer scores the
 * distribution vLLM sampled from: logits / T). Pure, so the workflow computes it and
 * the history shows exactly what the trainer got.
 *
 * A config stored before [trainer.model] existed has no `model` here: the trainer's
 * defaults, which are this schema's, apply.
 */
export function toTrainerConfig(config: RunConfig): Record<string, unknown> {
  const t = config.trainer;
  return {
    ...t,
    model: { ...t.model, path: config.model.path },
    loss: { ...t.loss, temperature: config.sampling.temperature },
    seq_len: config.orchestrator.seq_len,
  };
}
