import { readFileSync } from 'node:fs';
import type { RunConfig } from '../config/schema';
import { loadModelTokenizer } from '../samples/tokenizer';
import { parseSftJsonl, SftDataError, successful } from '../sft/trajectories';
import { fail, ok, type CheckLine } from './types';

/**
 * [sft]: every trajectory file read and checked against the model's chat template, as
 * SftRun's prepareSftData will (src/sft/trajectories.ts), so a bad line is reported with
 * its file and line before anything starts. Nothing for a config without [sft].
 */
export function checkSft(c: RunConfig): CheckLine[] {
  if (!c.sft) return [];
  let tok;
  try {
    tok = loadModelTokenizer(c.model.path);
  } catch (err) {
    return [fail('sft', `sft.data cannot be checked without the model's tokenizer: ${(err as Error).message}`)];
  }
  const lines: CheckLine[] = [];
  let total = 0;
  let kept = 0;
  c.sft.data.forEach((file, i) => {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      lines.push(fail('sft', `sft.data.${i}: cannot read ${file}: ${(err as Error).message}. ` +
        'Fix: make demonstrations (bin/ratchet demos --out <file>) or name an existing JSONL file of trajectories'));
      return;
    }
    try {
      const items = parseSftJsonl(text, file, tok);
      const ok_ = c.sft!.min_reward === undefined ? items.length : successful(items.map((x) => x.trajectory), c.sft!.min_reward).length;
      total += items.length;
      kept += ok_;
      lines.push(ok('sft', `sft.data.${i}: ${file}: ${items.length} trajectories match the model's chat template` +
        (c.sft!.min_reward === undefined ? '' : `, ${ok_} reach sft.min_reward ${c.sft!.min_reward}`)));
    } catch (err) {
      if (!(err instanceof SftDataError)) throw err;
      lines.push(fail('sft', `sft.data.${i}: ${err.message}`));
    }
  });
  if (lines.every((l) => l.level === 'ok') && kept === 0 && total > 0) {
    lines.push(fail('sft', `sft.min_reward = ${c.sft.min_reward}: none of the ${total} trajectories reach it. Fix: lower it, or add successful episodes`));
  }
  return lines;
}
