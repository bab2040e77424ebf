/** One finding of `ratchet check`: which part, how bad, what and (for a failure) the key or file to fix. */
export type CheckSection = 'config' | 'environments' | 'datasets' | 'model' | 'gpu' | 'host' | 'stack' | 'sft' | 'eval' | 'sampling';
export type CheckLevel = 'ok' | 'warn' | 'fail';

export interface CheckLine {
  section: CheckSection;
  level: CheckLevel;
  message: string;
}

export const ok = (section: CheckSection, message: string): CheckLine => ({ section, level: 'ok', message });
export const warn = (section: CheckSection, message: string): CheckLine => ({ section, level: 'warn', message });
export const fail = (section: CheckSection, message: string): CheckLine => ({ section, level: 'fail', message });
