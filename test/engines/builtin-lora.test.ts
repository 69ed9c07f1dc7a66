/**
 * Adapter-only weight sync on the builtin engine: a `{ kind: 'lora' }` update makes the engine
 * serve base + adapter (the same tokens and logprobs as the merged model), leaves its base weights
 * bit for bit, labels tokens with the adapter's version, replaces the adapter in place on the next
 * version, and survives sleep/wake. The trainer publishes exactly that update for a LoRA policy.
 */
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { policyWeightUpdate } from '../../engines/types.ts';
import { initBackend, tf } from '../../model/backend.ts';
import { readConfig, readWeights } from '../../model/checkpoint.ts';
import { CausalLM } from '../../model/llama.ts';
import {
  mergeLoraAdapter,
  parseTargetModules,
  type LoraAdapter,
} from '../../model/lora-adapter.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';
import { Trainer } from '../../roles/trainer.ts';

const dir = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url));
const prompt = [2, 25, 23, 15, 25, 26, 3];

/** An adapter over the tiny model with random (non-zero) B, so it changes the outputs. */
function randomAdapter(seed: number): LoraAdapter {
  const m = CausalLM.fromTensors(readConfig(dir), readWeights(dir));
  const l = m.attachLora(
    { r: 4, alpha: 8, targetModules: parseTargetModules('all-linear'), dropout: 0, baseModel: dir },
    { seed },
  );
  tf.tidy(() => l.vars.forEach((v) => v.assign(tf.randomNormal(v.shape, 0, 0.2, 'float32', seed))));
  const a = l.exportAdapter();
  m.dispose();
  return a;
}

const greedy = { maxNewTokens: 12, greedy: true };

test("a lora update serves base + adapter: the merged model's tokens and logprobs, base untouched, versions labelled", async () => {
  await initBackend('wasm');
  const engine = await BuiltinEngine.create({ modelPath: dir });
  const base = engine.exportWeights();
  const before = await engine.generate({ inputIds: prompt, gconfig: greedy });
  const adapter = randomAdapter(1);
  await engine.updateWeights({ kind: 'lora', adapter }, 1);
  const got = await engine.generate({ inputIds: prompt, gconfig: greedy });
  assert.ok(got.outputVersions.every((v) => v === 1));
  const merged = await BuiltinEngine.create({
    model: CausalLM.fromTensors(readConfig(dir), mergeLoraAdapter(readWeights(dir), adapter)),
  });
  const want = await merged.generate({ inputIds: prompt, gconfig: greedy });
  assert.equal(got.outputTokens, want.outputTokens);
  assert.ok(maxAbsDiff(got.outputLogprobs, want.outputLogprobs) < 1e-4);
  assert.not.equal(got.outputLogprobs, before.outputLogprobs, 'the adapter changed the policy');
  const after = engine.exportWeights();
  for (const [name, t] of Object.entries(base))
    assert.ok(maxAbsDiff(after[name]!.data, t.data) === 0, `${name} untouched`);
  // The next version replaces the adapter in place; sleep/wake keeps it.
  const next = randomAdapter(2);
  await engine.updateWeights({ kind: 'lora', adapter: next }, 2);
  await engine.sleep();
  await engine.wakeUp();
  const again = await engine.generate({ inputIds: prompt, gconfig: greedy });
  assert.ok(again.outputVersions.every((v) => v === 2));
  assert.ok(
    maxAbsDiff(
      engine.exportAdapter()!.tensors[Object.keys(next.tensors)[0]!]!.data,
      next.tensors[Object.keys(next.tensors)[0]!]!.data,
    ) === 0,
  );
  await Promise.all([engine.close(), merged.close()]);
});

test("a LoRA trainer publishes only its adapter, and the engine that loads it computes the trainer's logprobs; the reference is the base", async () => {
  await initBackend('wasm');
  const trainer = new Trainer({
    pretrain: dir,
    learningRate: 1e-3,
    trainBatchSize: 2,
    microTrainBatchSize: 2,
    lora: {
      config: { r: 2, alpha: 4, targetModules: ['q_proj', 'v_proj'], dropout: 0, baseModel: dir },
      seed: 1,
    },
  });
  await trainer.ready();
  const seq = [...prompt, 30, 31, 32, 1];
  const base = await trainer.logprobs([seq]);
  await trainer.train([
    {
      inputIds: seq,
      actionMask: [0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
      advantages: new Array(10).fill(1),
      oldLogprobs: base[0]!,
    },
  ]);
  const w = await trainer.weights();
  assert.is(w.version, 1);
  assert.ok(w.adapter && !w.tensors, 'adapter only');
  const bytes = Object.values(w.adapter!.tensors).reduce((n, t) => n + 4 * t.data.length, 0);
  assert.ok(bytes < 20_000, `adapter is ${bytes} bytes`);
  const engine = await BuiltinEngine.create({ modelPath: dir });
  await engine.updateWeights(policyWeightUpdate(w), w.version);
  const r = await engine.generate({ inputIds: prompt, gconfig: { ...greedy, maxNewTokens: 6 } });
  const full = [...prompt, ...r.outputTokens];
  const trained = (await trainer.logprobs([full]))[0]!.slice(prompt.length - 1);
  assert.ok(maxAbsDiff(trained, r.outputLogprobs) < 1e-4, 'engine logprobs = trainer logprobs');
  assert.ok(r.outputVersions.every((v) => v === 1));
  // The base is the reference: the adapter left out gives the untrained model's logprobs.
  assert.ok(maxAbsDiff((await trainer.referenceLogprobs([seq]))[0]!, base[0]!) === 0);
  assert.ok(
    maxAbsDiff((await trainer.logprobs([seq]))[0]!, base[0]!) > 1e-4,
    'the adapter trained',
  );
  trainer.dispose();
  await engine.close();
});

test.run();
