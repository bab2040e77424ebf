/**
 * The repository's documents link only to files inside it, and every link lands: a relative link names a file
 * or folder that git tracks (or that the link's own document creates, such as BENCHMARKS.md's), and a link with
 * an #anchor names a heading of its target, slugged as GitHub renders headings. Cross-cutting: it reads every
 * tracked Markdown file, not one module.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';

const root = path.join(__dirname, '../../..');
const tracked = execFileSync('git', ['ls-files', '*.md'], { cwd: root, encoding: 'utf8' })
  .split('\n').filter((f) => f && !f.startsWith('test/fixtures/') && existsSync(path.join(root, f)));

/** GitHub's heading anchor: lower case, punctuation dropped (not `-` or `_`), spaces to `-`; repeats get -1, -2. */
function headingSlugs(markdown: string): Set<string> {
  const slugs = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const m = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const text = (m[1] ?? '').replace(/`/g, '').replace(/\[([^\]]*)\]\([^)]*\)/g, '$1');
    const base = text.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    slugs.add(n === 0 ? base : `${base}-${n}`);
  }
  return slugs;
}

/** Markdown links `[text](target)` outside code fences and inline code; targets as written. */
function markdownLinks(markdown: string): { target: string; line: number }[] {
  const links: { target: string; line: number }[] = [];
  let fenced = false;
  markdown.split('\n').forEach((raw, i) => {
    if (/^\s*```/.test(raw)) fenced = !fenced;
    if (fenced) return;
    const line = raw.replace(/`[^`]*`/g, '');
    for (const m of line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) links.push({ target: m[1] ?? '', line: i + 1 });
  });
  return links;
}

describe('document links', () => {
  test('headingSlugs follows GitHub: punctuation dropped, spaces to hyphens, repeats numbered', () => {
    const slugs = headingSlugs('# The main job\'s start (issue 38, CPU)\n## `npm run bench:learn`: does it?\n## A\n## A\n```\n# not a heading\n```\n');
    expect([...slugs]).toEqual(['the-main-jobs-start-issue-38-cpu', 'npm-run-benchlearn-does-it', 'a', 'a-1']);
  });

  test('markdownLinks skips code: fenced blocks and inline spans are not links', () => {
    const links = markdownLinks('see [a](docs/a.md#x) and `[b](nope.md)`\n```\n[c](nope.md)\n```\n[d](https://x.org)');
    expect(links).toEqual([{ target: 'docs/a.md#x', line: 1 }, { target: 'https://x.org', line: 5 }]);
  });

  test('every tracked document is read', () => {
    expect(tracked).toEqual(expect.arrayContaining(['README.md', 'BENCHMARKS.md', 'docs/architecture.md', 'docs/testing.md']));
  });

  test.each(tracked)('%s: its relative links land inside the repository, on a heading where they name one', (file) => {
    const text = readFileSync(path.join(root, file), 'utf8');
    const problems: string[] = [];
    for (const { target, line } of markdownLinks(text)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: and the like
      const [pathPart, anchor] = target.split('#', 2) as [string, string | undefined];
      const resolved = pathPart ? path.resolve(path.dirname(path.join(root, file)), decodeURIComponent(pathPart)) : path.join(root, file);
      const rel = path.relative(root, resolved);
      if (rel.startsWith('..') || path.isAbsolute(rel)) {
        problems.push(`${file}:${line}: ${target} points outside the repository. Fix: link a file inside it (docs/ for user-facing text)`);
        continue;
      }
      if (!existsSync(resolved)) {
        problems.push(`${file}:${line}: ${target}: no such file. Fix: correct the path or drop the link`);
        continue;
      }
      if (anchor && statSync(resolved).isFile() && resolved.endsWith('.md') && !headingSlugs(readFileSync(resolved, 'utf8')).has(anchor)) {
        problems.push(`${file}:${line}: ${target}: ${rel} has no heading whose anchor is #${anchor}. Fix: link an existing heading`);
      }
    }
    expect(problems).toEqual([]);
  });
});
