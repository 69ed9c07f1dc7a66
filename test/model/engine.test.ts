import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as tick } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { initBackend, tf } from '../../model/backend.ts';
import { builtinTokenizerFiles } from '../../model/builtin.ts';
import { saveModel } from '../../model/checkpoint.ts';
import { recomputeLastLogits } from '../../model/kv-cache.ts';
import { forwardLogprobs } from '../../model/sequence-logprobs.ts';
import { randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';
import type { CausalLM } from '../../model/llama.ts';

const dirs: string[] = [];
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** Greedy continuation by recomputing the whole prefix each step (the slow, obvious way). */
function greedyReference(m: CausalLM, prompt: number[], n: number): number[] {
  const seq = [...prompt];
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const lg = recomputeLastLogits(m, [seq]);
    let arg = 0;
    for (let j = 1; j < lg.length; j++) if (lg[j]! > lg[arg]!) arg = j;
    seq.push(arg);
    out.push(arg);
  }
  return out;
}

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await tick();
  }
}

const setup = async (seed = 31): Promise<{ m: CausalLM; engine: BuiltinEngine }> => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig({ max_position_embeddings: 128 }), seed);
  return { m, engine: await BuiltinEngine.create({ model: m, eosTokenIds: [], seed: 5 }) };
};

test('continuous batching: a request arriving mid-batch joins at the next step; outputs equal solo greedy decoding', async () => {
  const { m, engine } = await setup();
  const a = [1, 2, 3, 4, 5];
  const b = [7, 9, 11];
  const pa = engine.generate({ inputIds: a, gconfig: { greedy: true, maxNewTokens: 24 } });
  await until(() => engine.stats.generatedTokens >= 5, 'A to start');
  const stepsBefore = engine.stats.decodeSteps;
  const pb = engine.generate({ inputIds: b, gconfig: { greedy: true, maxNewTokens: 10 } });
  const [ra, rb] = await Promise.all([pa, pb]);
  assert.is(engine.stats.maxRows, 2, 'B shared decode steps with A');
  assert.ok(engine.stats.decodeSteps - stepsBefore < 24, 'B did not wait for A to finish');
  assert.equal(ra.outputTokens, greedyReference(m, a, 24));
  assert.equal(rb.outputTokens, greedyReference(m, b, 10));
  assert.is(ra.stopReason, 'length');
  assert.equal(ra.outputVersions, new Array(24).fill(0));
  await engine.close();
  m.dispose();
});

test('logprobs of sampled tokens agree with the trainer recompute at the same temperature (1e-4)', async () => {
  const { m, engine } = await setup(32);
  const prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]];
  for (const temperature of [1, 0.7]) {
    const rs = await Promise.all(
      prompts.map((p, i) =>
        engine.generate({
          inputIds: p,
          gconfig: { temperature, topK: 20, topP: 0.95, maxNewTokens: 16, seed: i },
        }),
      ),
    );
    const seqs = rs.map((r, i) => [...prompts[i]!, ...r.outputTokens]);
    const { logprobs } = await forwardLogprobs(m, seqs, { temperature });
    rs.forEach((r, i) => {
      const recomputed = logprobs[i]!.slice(prompts[i]!.length);
      r.outputLogprobs.forEach((lp, t) =>
        assert.ok(
          Math.abs(lp - recomputed[t]!) < 1e-4,
          `T=${temperature} seq ${i} tok ${t}: ${lp} vs ${recomputed[t]}`,
        ),
      );
    });
  }
  await engine.close();
  m.dispose();
});

test('pause (abort) returns partial output; queued requests wait; versions follow updateWeights', async () => {
  const { m, engine } = await setup(33);
  const p1 = engine.generate({ inputIds: [1, 2, 3], gconfig: { maxNewTokens: 60 } });
  await until(() => engine.stats.generatedTokens >= 3, 'generation to start');
  await engine.pause();
  const r1 = await p1;
  assert.is(r1.stopReason, 'abort');
  assert.ok(
    r1.outputTokens.length >= 3 && r1.outputTokens.length < 60,
    `partial: ${r1.outputTokens.length}`,
  );
  assert.is(r1.outputLogprobs.length, r1.outputTokens.length);
  let done = false;
  const p2 = engine
    .generate({ inputIds: [...[1, 2, 3], ...r1.outputTokens], gconfig: { maxNewTokens: 5 } })
    .then((r) => ((done = true), r));
  await tick();
  await tick();
  assert.is(done, false, 'no decoding while paused');
  const other = randomModel(tinyLlamaConfig({ max_position_embeddings: 128 }), 77);
  await engine.updateWeights({ kind: 'tensors', tensors: other.exportWeights() }, 1);
  await engine.resume();
  const r2 = await p2;
  assert.equal(r2.outputVersions, [1, 1, 1, 1, 1]);
  assert.is(engine.getVersion(), 1);
  other.dispose();
  await engine.close();
  m.dispose();
});

test('pause (wait) lets running requests finish; an update without pause switches versions mid-sequence', async () => {
  const { m, engine } = await setup(34);
  const p1 = engine.generate({ inputIds: [5, 6], gconfig: { maxNewTokens: 12 } });
  await until(() => engine.stats.generatedTokens >= 2, 'start');
  await engine.pause({ mode: 'wait' });
  const r1 = await p1;
  assert.is(r1.stopReason, 'length');
  assert.is(r1.outputTokens.length, 12);
  await engine.resume();
  const p2 = engine.generate({ inputIds: [5, 6], gconfig: { maxNewTokens: 30 } });
  await until(() => engine.stats.generatedTokens >= 12 + 4, 'second start');
  await engine.updateWeights({ kind: 'tensors', tensors: m.exportWeights() }, 7);
  const r2 = await p2;
  const first7 = r2.outputVersions.indexOf(7);
  assert.ok(first7 > 0, 'some tokens from version 0, then version 7');
  assert.ok(r2.outputVersions.slice(first7).every((v) => v === 7));
  assert.ok(r2.outputVersions.slice(0, first7).every((v) => v === 0));
  await engine.close();
  m.dispose();
});

test('stop token ids, stop strings, minNewTokens and generateN seeds', async () => {
  const { m, engine } = await setup(35);
  const free = await engine.generate({
    inputIds: [1, 2],
    gconfig: { greedy: true, maxNewTokens: 20 },
  });
  const stopAt = free.outputTokens[4]!;
  const first = free.outputTokens.indexOf(stopAt);
  const r = await engine.generate({
    inputIds: [1, 2],
    gconfig: { greedy: true, maxNewTokens: 20, stopTokenIds: [stopAt] },
  });
  assert.is(r.stopReason, 'stop');
  assert.equal(r.outputTokens, free.outputTokens.slice(0, first + 1), 'the stop token is included');
  const rMin = await engine.generate({
    inputIds: [1, 2],
    gconfig: { greedy: true, maxNewTokens: 20, stopTokenIds: [stopAt], minNewTokens: 5 },
  });
  assert.ok(rMin.outputTokens.length >= 5);
  const n1 = await engine.generateN({
    inputIds: [3],
    gconfig: { n: 4, maxNewTokens: 8, seed: 100 },
  });
  const n2 = await engine.generateN({
    inputIds: [3],
    gconfig: { n: 4, maxNewTokens: 8, seed: 100 },
  });
  assert.is(n1.length, 4);
  assert.equal(
    n1.map((x) => x.outputTokens),
    n2.map((x) => x.outputTokens),
  );
  assert.ok(new Set(n1.map((x) => x.outputTokens.join())).size > 1, 'different samples per index');
  assert.not.ok(
    await engine.generate({ inputIds: [1], gconfig: { n: 2 } }).then(
      () => true,
      () => false,
    ),
  );
  await engine.close();
  m.dispose();

  // stop strings need a tokenizer: use the built-in one with a model of its vocabulary size
  const files = builtinTokenizerFiles();
  const { ChatTokenizer } = await import('../../model/tokenizer.ts');
  const tok = new ChatTokenizer(files.tokenizerJson, files.tokenizerConfig);
  const m2 = randomModel(
    tinyLlamaConfig({ vocab_size: tok.vocabSize, max_position_embeddings: 128 }),
    36,
  );
  const e2 = await BuiltinEngine.create({ model: m2, tokenizer: tok, eosTokenIds: [] });
  const base = await e2.generate({
    inputIds: [2, 10],
    gconfig: { greedy: true, maxNewTokens: 16 },
  });
  const stop = tok.decode(base.outputTokens.slice(2, 4));
  const rs = await e2.generate({
    inputIds: [2, 10],
    gconfig: { greedy: true, maxNewTokens: 16, stop: [stop] },
  });
  assert.is(rs.stopReason, 'stop');
  assert.ok(tok.decode(rs.outputTokens).endsWith(stop));
  assert.ok(rs.outputTokens.length <= 4);
  await e2.close();
  m2.dispose();
});

test('sleep frees the weights and the cache; wakeUp restores the same behaviour; close rejects queued work', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig({ max_position_embeddings: 128 }), 37);
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-engine-'));
  dirs.push(dir);
  saveModel(dir, m);
  m.dispose();
  const engine = await BuiltinEngine.create({ modelPath: dir, eosTokenIds: [] });
  const before = await engine.generate({
    inputIds: [4, 4],
    gconfig: { greedy: true, maxNewTokens: 6 },
  });
  const awake = tf.memory().numTensors;
  await engine.sleep();
  assert.ok(tf.memory().numTensors < awake, 'weights released');
  const pending = engine.generate({ inputIds: [4, 4], gconfig: { greedy: true, maxNewTokens: 6 } });
  await engine.wakeUp();
  assert.equal((await pending).outputTokens, before.outputTokens);
  // an update that arrives while asleep is applied on wakeUp
  const other = randomModel(tinyLlamaConfig({ max_position_embeddings: 128 }), 38);
  await engine.sleep();
  await engine.updateWeights({ kind: 'tensors', tensors: other.exportWeights() }, 2);
  await engine.wakeUp();
  const updated = await engine.generate({
    inputIds: [4, 4],
    gconfig: { greedy: true, maxNewTokens: 6 },
  });
  assert.equal(updated.outputTokens, greedyReference(other, [4, 4], 6));
  assert.equal(updated.outputVersions, new Array(6).fill(2));
  other.dispose();
  await engine.pause();
  const queued = engine.generate({ inputIds: [1], gconfig: { maxNewTokens: 3 } });
  await engine.close();
  let rejected = false;
  await queued.catch(() => (rejected = true));
  assert.ok(rejected);
});

test.run();
