import type { EvalMetrics, RewardFn, ScoreInput } from '../types';
import { normalizePath } from '../shell';
import { goldFiles } from '../../tasks/schema';

/**
 * Localization rewards (seed 001): six components, plus file- and
 * function-level precision / recall / F1, reported and optionally weighted.
 * Penalties are <= 0 and carry positive weights.
 */

export interface SetScores { precision: number; recall: number; f1: number; hits: number; extra: number; missed: number }

export function setScores(predicted: string[], gold: string[]): SetScores {
  const p = new Set(predicted);
  const g = new Set(gold);
  const hits = [...p].filter((x) => g.has(x)).length;
  const precision = p.size === 0 ? 0 : hits / p.size;
  const recall = g.size === 0 ? (p.size === 0 ? 1 : 0) : hits / g.size;
  const f1 = precision + recall === 0 ? 0 : (2 * precision * recall) / (precision + recall);
  return { precision, recall, f1, hits, extra: p.size - hits, missed: g.size - hits };
}

export function predictedFiles(input: ScoreInput): string[] {
  const files = input.final.files;
  return Array.isArray(files) ? files.filter((f): f is string => typeof f === 'string').map(normalizePath).filter(Boolean) : [];
}

/** Functions compare by bare name: `pkg/mod.py::Class.method` and `method` match. */
export function bareFunction(name: string): string {
  const afterFile = name.includes('::') ? name.slice(name.lastIndexOf('::') + 2) : name;
  return (afterFile.split('.').pop() ?? afterFile).replace(/\(.*\)$/, '').trim();
}

function predictedFunctions(input: ScoreInput): string[] {
  const fns = input.final.functions;
  return Array.isArray(fns) ? fns.filter((f): f is string => typeof f === 'string').map(bareFunction).filter(Boolean) : [];
}

const files = (i: ScoreInput) => setScores(predictedFiles(i), goldFiles(i.task).map(normalizePath));
const functions = (i: ScoreInput) => setScores(predictedFunctions(i), (i.task.gold_functions ?? []).map(bareFunction));

export const sweGrepRubric: RewardFn[] = [
  { name: 'correct_files', weight: 1.0, fn: (i) => files(i).recall },
  { name: 'incorrect_files_penalty', weight: 0.5, fn: (i) => { const s = files(i); return s.hits + s.extra === 0 ? 0 : -s.extra / (s.hits + s.extra); } },
  { name: 'missed_files_penalty', weight: 0.5, fn: (i) => { const s = files(i); return s.hits + s.missed === 0 ? 0 : -s.missed / (s.hits + s.missed); } },
  { name: 'max_tokens_penalty', weight: 0.25, fn: (i) => (i.stop_reason === 'max_tokens' || i.stop_reason === 'context_length' ? -1 : 0) },
  { name: 'max_tool_calls_penalty', weight: 0.25, fn: (i) => (i.stop_reason === 'max_tool_calls' ? -1 : 0) },
  { name: 'completion_bonus', weight: 0.2, fn: (i) => (i.answered && i.stop_reason === 'completed' ? 1 : 0) },
  { name: 'file_precision', weight: 0, fn: (i) => files(i).precision },
  { name: 'file_recall', weight: 0, fn: (i) => files(i).recall },
  { name: 'file_f1', weight: 0, fn: (i) => files(i).f1 },
  { name: 'function_precision', weight: 0, fn: (i) => (i.task.gold_functions?.length ? functions(i).precision : 0) },
  { name: 'function_recall', weight: 0, fn: (i) => (i.task.gold_functions?.length ? functions(i).recall : 0) },
  { name: 'function_f1', weight: 0, fn: (i) => (i.task.gold_functions?.length ? functions(i).f1 : 0) },
];

/** An eval's localization: the file and function rewards, over the tasks that have gold files / functions. */
export const sweGrepEvalMetrics: EvalMetrics = {
  localization: {
    file: { precision: 'file_precision', recall: 'file_recall', f1: 'file_f1', applies: (task) => goldFiles(task).length > 0 },
    function: { precision: 'function_precision', recall: 'function_recall', f1: 'function_f1', applies: (task) => (task.gold_functions?.length ?? 0) > 0 },
  },
};
