// Extension points are tables, not if-chains: an engine kind is named in code only by its
// registry (engines/registry.ts) and its own folder, so a new engine is its folder plus one entry.
// Everything else asks the entry (`runsInProcess(kind)`, `engineSpec(kind).gguf`) or reads the
// kind lists it derives (`offeredEngineKinds`); doc comments and quoted texts may still name them.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { engineSpec, localEngineKinds, offeredEngineKinds } from '../../engines/registry.ts';
import { outsideParts, root, sourceFiles, type SourceFile } from './source-files.ts';

/** The file with its comments blanked out (line numbers kept); quoted kinds stay visible. */
const withoutComments = (text: string) =>
  text
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');

const kinds = ['builtin', 'llamacpp', 'sglang', 'vllm', 'simulated'];
const kind = kinds.join('|');
/** A kind compared with, or listed beside another kind. */
const named = new RegExp(
  `(===|!==)\\s*'(${kind})'|'(${kind})'\\s*(===|!==)|'(${kind})'\\s*,\\s*'(${kind})'`,
);

function kindsNamed(files: SourceFile[]): string[] {
  const hits: string[] = [];
  for (const f of files)
    withoutComments(f.text)
      .split('\n')
      .forEach((line, i) => {
        if (named.test(line)) hits.push(`${f.path}:${i + 1}: ${line.trim()}`);
      });
  return hits;
}

const product = (): SourceFile[] =>
  sourceFiles().filter(
    (f) =>
      !outsideParts.some((p) => f.path.startsWith(`${p}/`)) &&
      f.path !== 'engines/registry.ts' &&
      !kinds.some((k) => f.path.startsWith(`engines/${k}/`)),
  );

test('no product code outside the engine registry branches on an engine kind', () => {
  assert.ok(product().length > 200, 'the product is found');
  const hits = kindsNamed(product());
  assert.equal(
    hits,
    [],
    `an engine kind is named outside engines/registry.ts:\n${hits.join('\n')}`,
  );
});

test('the check sees comparisons and lists, not comments or quoted texts', () => {
  const probe = (text: string) => kindsNamed([{ path: 'train/x.ts', text }]).length;
  assert.is(probe("if (o.engine === 'llamacpp') x();"), 1);
  assert.is(probe("const local = ['builtin', 'llamacpp'];"), 1);
  assert.is(probe("const help = 'for --engine sglang or vllm';"), 0);
  assert.is(probe("/** o.engine === 'vllm' */ const y = 1;"), 0);
});

test('every engine kind has its folder; the registry answers for each and refuses others', () => {
  for (const k of kinds) {
    assert.ok(existsSync(join(root, 'engines', k)), `engines/${k}/`);
    assert.type(engineSpec(k).create, 'function');
  }
  assert.equal(offeredEngineKinds, ['builtin', 'llamacpp', 'sglang', 'vllm']);
  assert.equal(localEngineKinds, ['builtin', 'llamacpp']);
  assert.throws(
    () => engineSpec('tgi'),
    (e: Error) => e.message === "--engine: expected builtin, llamacpp, sglang or vllm, got 'tgi'",
  );
});

test.run();
