import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { BatchKVCache, decodeStep, prefill, recomputeLastLogits } from '../../model/kv-cache.ts';
import { maxAbsDiff, randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

test('incremental decoding with the KV cache equals recomputing the prefix, with rows joining and leaving', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 7);
  const before = tf.memory().numTensors;
  const seqs = [
    [1, 2, 3, 4, 5, 6, 7],
    [9, 8],
    [20, 21, 22, 23],
  ];
  const { cache, logits } = prefill(m, seqs);
  const V = m.config.vocab_size;
  assert.ok(maxAbsDiff(logits, recomputeLastLogits(m, seqs)) < 1e-4, 'prefill with left padding');
  for (let b = 0; b < seqs.length; b++) {
    assert.ok(
      maxAbsDiff(logits.slice(b * V, (b + 1) * V), recomputeLastLogits(m, [seqs[b]!])) < 1e-4,
      `row ${b} alone`,
    );
  }
  for (let step = 0; step < 4; step++) {
    const next = seqs.map((s, b) => (s.length * 7 + b + step) % V);
    seqs.forEach((s, b) => s.push(next[b]!));
    const inc = decodeStep(m, cache, next);
    for (let b = 0; b < seqs.length; b++) {
      const d = maxAbsDiff(inc.slice(b * V, (b + 1) * V), recomputeLastLogits(m, [seqs[b]!]));
      assert.ok(d < 1e-4, `step ${step} row ${b}: ${d}`);
    }
    if (step === 1) {
      // a row leaves and a new, longer one joins
      cache.select([0, 2]);
      seqs.splice(1, 1);
      const joining = [[5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]];
      const p = prefill(m, joining);
      cache.append(p.cache);
      seqs.push(joining[0]!);
      // the joining row's next token comes from its prefill logits; feed one token to all rows
    }
  }
  assert.is(cache.batchSize, 3);
  cache.dispose();
  assert.is(tf.memory().numTensors, before, 'no tensors leak');
  m.dispose();
});

test('an empty cache accepts rows and trims unused columns', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 8);
  const c = new BatchKVCache([], []);
  c.append(prefill(m, [[1, 2, 3, 4, 5, 6]]).cache);
  c.append(prefill(m, [[7, 8]]).cache);
  assert.is(c.width, 6);
  c.select([1]);
  assert.is(c.width, 2);
  assert.equal(c.lens, [2]);
  c.dispose();
  m.dispose();
});

test.run();
