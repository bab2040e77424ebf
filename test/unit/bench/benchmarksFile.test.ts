import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeBenchSection } from '../../../src/bench/benchmarksFile';

describe('writeBenchSection', () => {
  const file = (): string => {
    const f = path.join(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-md-')), 'BENCHMARKS.md');
    writeFileSync(f, '# Benchmarks\n\nhand-written text\n');
    return f;
  };

  it('appends a section where there is none, then replaces only that section', () => {
    const f = file();
    writeBenchSection('eval', ['old row'], f);
    writeBenchSection('other', ['other row'], f);
    writeBenchSection('eval', ['new row'], f);
    const doc = readFileSync(f, 'utf8');
    expect(doc).toContain('hand-written text');
    expect(doc).toContain('<!-- bench:eval begin -->\nnew row\n<!-- bench:eval end -->');
    expect(doc).not.toContain('old row');
    expect(doc).toContain('other row');
    expect(doc.match(/bench:eval begin/g)).toHaveLength(1);
    // The replaced section keeps its place, ahead of the one written after it.
    expect(doc.indexOf('new row')).toBeLessThan(doc.indexOf('other row'));
  });
});
