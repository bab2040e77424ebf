/**
 * The seed of one eval episode that depends on the task and the sample index only: two
 * policies evaluated on the same task and sample draw the same random numbers (common random
 * numbers), so a paired comparison of the two is not spread by the draws. Pure: workflow code
 * imports it. FNV-1a over the task id, then the sample mixed in; 31 bits, as vLLM takes a seed.
 */
export function evalSeed(instanceId: string, sample: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < instanceId.length; i++) {
    h ^= instanceId.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  h = (h ^ Math.imul(sample + 1, 0x9e3779b1)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  return (h ^ (h >>> 13)) & 0x7fffffff;
}
