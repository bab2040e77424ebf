/**
 * Golden samples: the exact ids and loss mask the builder makes from a fixed
 * multi-turn tool episode, with each real tokenizer and template. A change in the
 * tokenizer library, the template or the splice logic shows up here as a diff.
 * Regenerate deliberately with UPDATE_GOLDEN=1 (and review the diff). The template's
 * hash is not compared: an edit that renders the same tokens is not a change here.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { assembleTrajectory, type CompleteTurn } from '../../../src/samples/assemble';
import { loadModelTokenizer } from '../../../src/samples/tokenizer';
import { QWEN3_DIR, simulateTrajectory, SMOLLM2_DIR, smolLM2Available, toolConversation } from '../../fixtures/samples/simulate';

interface Golden {
  breaks: { turn: number; cause: string; at: number }[];
  samples: { turns: [number, number]; ids: number[]; mask: string; trainable_text: string }[];
}

function golden(dir: string, name: string): void {
  const tok = loadModelTokenizer(dir);
  const traj = simulateTrajectory(tok, toolConversation(2));
  const { segments, breaks } = assembleTrajectory(traj.turns as CompleteTurn[], tok, 'split', 'golden');
  const got: Golden = {
    breaks,
    samples: segments.map((s) => ({
      turns: [s.firstTurn, s.lastTurn], ids: s.ids, mask: s.mask.join(''),
      trainable_text: tok.decode(s.ids.filter((_, i) => s.mask[i])),
    })),
  };
  const file = path.join(__dirname, '..', '..', 'fixtures', 'samples', `golden-${name}.json`);
  if (process.env.UPDATE_GOLDEN === '1') writeFileSync(file, JSON.stringify(got, null, 1) + '\n');
  if (!existsSync(file)) throw new Error(`golden file ${file} is missing; create it with UPDATE_GOLDEN=1 and review it`);
  expect(got).toEqual(JSON.parse(readFileSync(file, 'utf8')));
}

test('golden: Qwen3 tool episode (splits at every turn)', () => golden(QWEN3_DIR, 'qwen3'));
(smolLM2Available() ? test : test.skip)('golden: SmolLM2 tool episode (one sample)', () => golden(SMOLLM2_DIR, 'smollm2'));
