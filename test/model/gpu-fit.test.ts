/**
 * model/README.md's table of what fits on one GPU is what `trainingMemory` computes: the rows
 * there equal `scripts/gpu-fit.ts`'s output (cells compared with the padding markdown
 * formatting adds taken out), so a change to the formula that leaves the table stale fails here.
 */
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { gpuFitTable } from '../../scripts/gpu-fit.ts';

const cells = (line: string): string =>
  line
    .split('|')
    .map((c) => c.trim())
    .join('|');

test("model/README.md's GPU-fit table equals scripts/gpu-fit.ts's output", () => {
  const want = gpuFitTable().split('\n').slice(2).map(cells);
  const readme = readFileSync(new URL('../../model/README.md', import.meta.url), 'utf8');
  const got = readme
    .split('\n')
    .filter((l) => /^\| (0\.6B|1\.7B|4B|8B) +\| +\d+ \|/.test(l))
    .map(cells);
  assert.equal(got, want);
});

test('the LoRA column counts r × (in + out) per adapted linear: Qwen3-0.6B at r=16', async () => {
  const { loraParameters, qwen3Shapes } = await import('../../scripts/gpu-fit.ts');
  // 28 layers × 16 × (q 1024→2048, k and v 1024→1024, o 2048→1024, gate and up 1024→3072, down 3072→1024).
  const perLayer = 16 * (3072 + 2 * 2048 + 3072 + 3 * 4096);
  assert.is(loraParameters(qwen3Shapes['0.6B']!, 16), 28 * perLayer);
});

test.run();
