// Types of test/helpers/integrationOrder.js (plain JS: jest loads its sequencer untransformed) for its unit test.
import Sequencer from '@jest/test-sequencer';

export interface OrderedTest { path: string; context: { config: { displayName?: { name: string } } } }
export function stackRank(file: string, source: string): 0 | 1 | 2;
export function orderByStackUse<T extends OrderedTest>(tests: T[], sourceOf: (file: string) => string): T[];
export default class IntegrationOrder extends Sequencer {}
