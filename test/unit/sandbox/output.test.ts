import { OutputCollector, truncationMarker, utf8SafeEnd } from '../../../src/sandbox/output';

describe('OutputCollector', () => {
  it('keeps everything under the limit', () => {
    const c = new OutputCollector(10);
    c.push('stdout', Buffer.from('hello'));
    c.push('stderr', Buffer.from('err'));
    expect([c.text('stdout'), c.text('stderr'), c.truncated]).toEqual(['hello', 'err', false]);
  });

  it('shares one budget between stdout and stderr and marks the cut stream', () => {
    const c = new OutputCollector(8);
    c.push('stdout', Buffer.from('123456'));
    c.push('stderr', Buffer.from('abcdef'));
    c.push('stdout', Buffer.from('more'));
    expect(c.text('stdout')).toBe('123456' + truncationMarker(8));
    expect(c.text('stderr')).toBe('ab' + truncationMarker(8));
    expect(c.truncated).toBe(true);
    expect(c.seenBytes).toBe(16);
  });

  it('cuts exactly at the limit with the documented marker', () => {
    const c = new OutputCollector(5);
    for (let i = 0; i < 1000; i++) c.push('stdout', Buffer.from('y\n'));
    expect(c.text('stdout')).toBe('y\ny\ny\n[... output truncated at 5 bytes ...]');
  });

  it('does not split a multi-byte character at the cut', () => {
    const c = new OutputCollector(4);
    c.push('stdout', Buffer.from('ab€')); // € is 3 bytes: only its first 2 fit
    expect(c.text('stdout')).toBe('ab' + truncationMarker(4));
  });

  it('rejects a bad limit', () => {
    expect(() => new OutputCollector(0)).toThrow(/positive integer/);
  });
});

describe('utf8SafeEnd', () => {
  it.each([
    ['ascii', Buffer.from('abc'), 3],
    ['complete 3-byte char', Buffer.from('a€'), 4],
    ['split 3-byte char', Buffer.from('a€').subarray(0, 3), 1],
    ['split 4-byte char', Buffer.from('😀').subarray(0, 3), 0],
    ['complete 4-byte char', Buffer.from('😀'), 4],
    ['empty', Buffer.alloc(0), 0],
  ])('%s', (_name, buf, end) => {
    expect(utf8SafeEnd(buf)).toBe(end);
  });
});
