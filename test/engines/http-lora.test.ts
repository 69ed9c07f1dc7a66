/**
 * LoRA weight sync on the SGLang and vLLM engines against the fake servers, which follow the real
 * run-time LoRA routes (SGLang `/load_lora_adapter`, `/unload_lora_adapter`, `/generate` with
 * `lora_path`; vLLM `/v1/load_lora_adapter`, `/v1/unload_lora_adapter`, `model: <adapter>`),
 * read the PEFT directory the engine wrote and generate under it: a new adapter name per
 * version, later requests under the new one, in-flight segments keeping theirs, the slots
 * respected, unknown names refused as the real servers refuse them.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import { httpCall } from '../../engines/http/http-call.ts';
import type { RemoteEngine, RemoteEngineOptions } from '../../engines/http/remote-engine.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import { peftTensorName, type LoraAdapter } from '../../model/lora-adapter.ts';
import { seededRandom } from '../../model/sampling.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { DeterministicGenerator } from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import {
  closedAfterEach,
  nextEvent,
  prompt,
  tempDir,
  testGenerator,
  vocabSize,
  whenGenerating,
} from './fake-fixtures.ts';

/** A small adapter whose values depend on `seed` (the fakes' generator hashes them). */
function adapter(seed: number, r = 4): LoraAdapter {
  const rand = seededRandom(seed);
  const mat = (n: number) => Float32Array.from({ length: n }, () => rand() - 0.5);
  const mod = 'model.layers.0.self_attn.q_proj';
  return {
    config: { r, alpha: 2 * r, targetModules: ['q_proj'], dropout: 0, baseModel: '/fake/model' },
    tensors: {
      [peftTensorName(mod, 'A')]: { shape: [r, 8], data: mat(r * 8) },
      [peftTensorName(mod, 'B')]: { shape: [8, r], data: mat(8 * r) },
    },
  };
}

/** What the fake generates greedily under `lora` from `inputIds` (its own model, merged). */
async function expected(
  fake: FakeServer,
  lora: LoraAdapter | undefined,
  inputIds: number[],
  n: number,
) {
  const seed = (fake.generator as DeterministicGenerator).seedFor(lora);
  const ref = new DeterministicGenerator({ vocabSize, eosTokenId: 10_000, weightsSeed: seed });
  const s = await ref.generate({
    inputIds,
    maxNewTokens: n,
    minNewTokens: 0,
    temperature: 0,
    topP: 1,
    topK: -1,
    stopTokenIds: [],
    stop: [],
    ignoreEos: false,
    signal: new AbortController().signal,
    hold: async () => undefined,
    onToken: () => undefined,
  });
  return s.tokens;
}

type Kind = 'sglang' | 'vllm';
const kinds: Kind[] = ['sglang', 'vllm'];

function makeFake(
  kind: Kind,
  o: { lora?: boolean; maxLoaded?: number; tokenDelayMs?: number } = {},
) {
  const opts = {
    generator: testGenerator(o.tokenDelayMs ?? 0),
    ...(o.lora === false ? {} : { lora: { maxLoaded: o.maxLoaded ?? 8, maxRank: 16 } }),
  };
  return kind === 'sglang'
    ? FakeSglangServer.start(opts)
    : FakeVllmServer.start({ ...opts, logprobsMode: 'processed_logprobs' });
}

function makeEngine(kind: Kind, url: string, o: Partial<RemoteEngineOptions>): RemoteEngine {
  const opts = { urls: [url], healthIntervalMs: 60_000, ...o };
  return kind === 'sglang'
    ? new SglangEngine(opts)
    : new VllmEngine({ ...opts, logprobsMode: 'processed_logprobs' });
}

/** The adapter name a generation body named (SGLang `lora_path`, vLLM `model`). */
function namedAdapter(kind: Kind, body: unknown): string | undefined {
  const b = body as { lora_path?: string; model?: string };
  return kind === 'sglang' ? b.lora_path : b.model;
}

const greedy = (n: number) => ({ inputIds: prompt, gconfig: { maxNewTokens: n, greedy: true } });

for (const kind of kinds) {
  const test = suite(`${kind} LoRA sync`);
  const own = closedAfterEach(test);
  const dirs: Array<() => void> = [];
  test.after.each(() => dirs.splice(0).forEach((f) => f()));
  const dir = () => {
    const d = tempDir();
    dirs.push(d.cleanup);
    return d.path;
  };

  test('an update loads the adapter under rtjob-v<version>; requests then run under it', async () => {
    const fake = own(await makeFake(kind));
    const loraDir = dir();
    const engine = own(makeEngine(kind, fake.url, { loraDir }));
    const a1 = adapter(1);
    const base = await engine.generate(greedy(12));
    assert.equal(base.outputTokens, await expected(fake, undefined, prompt, 12));
    assert.is(namedAdapter(kind, fake.generateBodies.at(-1)), undefined);
    await engine.updateWeights({ kind: 'lora', adapter: a1 }, 1);
    assert.equal([...fake.adapters.keys()], ['rtjob-v1']);
    assert.is(fake.adapters.get('rtjob-v1')!.path, join(loraDir, 'rtjob-v1'));
    const r = await engine.generate(greedy(12));
    assert.is(namedAdapter(kind, fake.generateBodies.at(-1)), 'rtjob-v1');
    assert.equal(r.outputTokens, await expected(fake, a1, prompt, 12));
    assert.not.equal(r.outputTokens, base.outputTokens);
    assert.equal(r.outputVersions, Array(12).fill(1));
    assert.is(engine.getVersion(), 1);
  });

  test('slots: a new name per version, the oldest beyond loraSlots - 1 unloaded and removed', async () => {
    const fake = own(await makeFake(kind));
    const loraDir = dir();
    const engine = own(makeEngine(kind, fake.url, { loraDir, loraSlots: 3 }));
    for (let v = 1; v <= 5; v++) {
      await engine.updateWeights({ kind: 'lora', adapter: adapter(10 + v) }, v);
      const live = Array.from(
        { length: Math.min(v, 2) },
        (_, i) => `rtjob-v${v - Math.min(v, 2) + 1 + i}`,
      );
      assert.equal(engine.loadedAdapters(), live);
      await fake.waitFor(() => fake.adapters.size === live.length);
      assert.equal([...fake.adapters.keys()], live);
    }
    assert.ok(fake.stats.maxLoadedAdapters <= 3, `held ${fake.stats.maxLoadedAdapters} at once`);
    assert.is(fake.stats.adapterLoads, 5);
    assert.ok(!existsSync(join(loraDir, 'rtjob-v1')) && !existsSync(join(loraDir, 'rtjob-v3')));
    assert.ok(existsSync(join(loraDir, 'rtjob-v5', 'adapter_model.safetensors')));
    // The same version sent again gets a fresh name.
    await engine.updateWeights({ kind: 'lora', adapter: adapter(99) }, 5);
    assert.equal(engine.loadedAdapters(), ['rtjob-v5', 'rtjob-v5-2']);
  });

  test('a segment in flight keeps its adapter within the slots; its tokens keep their version', async () => {
    const fake = own(await makeFake(kind, { tokenDelayMs: 3 }));
    const engine = own(makeEngine(kind, fake.url, { loraDir: dir(), loraSlots: 3 }));
    const a1 = adapter(1);
    await engine.updateWeights({ kind: 'lora', adapter: a1 }, 1);
    const running = engine.generate(greedy(200));
    await whenGenerating(fake)();
    await engine.updateWeights({ kind: 'lora', adapter: adapter(2) }, 2);
    assert.is(fake.adapters.get('rtjob-v1')!.inUse, 1, 'v1 still serving its request');
    const r = await running;
    assert.equal(r.outputVersions, Array(200).fill(1));
    assert.equal(r.outputTokens, await expected(fake, a1, prompt, 200));
    assert.is(r.stopReason, 'length');
  });

  test('past the slots, a segment in flight is cut and continues under the new adapter', async () => {
    const fake = own(await makeFake(kind, { tokenDelayMs: 3 }));
    const engine = own(makeEngine(kind, fake.url, { loraDir: dir(), loraSlots: 2 }));
    const [a1, a2] = [adapter(1), adapter(2)];
    await engine.updateWeights({ kind: 'lora', adapter: a1 }, 1);
    const running = engine.generate(greedy(400));
    await whenGenerating(fake)();
    await engine.updateWeights({ kind: 'lora', adapter: a2 }, 2);
    const r = await running;
    await fake.waitFor(() => fake.adapters.size === 1);
    assert.equal([...fake.adapters.keys()], ['rtjob-v2']);
    const cut = r.outputVersions.indexOf(2);
    assert.ok(cut >= 0, 'some tokens under version 2');
    assert.equal(new Set(r.outputVersions.slice(cut)), new Set([2]));
    assert.equal(new Set(r.outputVersions.slice(0, cut)), new Set(cut ? [1] : []));
    assert.is(r.outputTokens.length, 400);
    const head = r.outputTokens.slice(0, cut);
    assert.equal(head, (await expected(fake, a1, prompt, 400)).slice(0, cut));
    assert.equal(
      r.outputTokens.slice(cut),
      await expected(fake, a2, prompt.concat(head), 400 - cut),
    );
  });

  test('a server without LoRA fails the update on every server; the version stays', async () => {
    const fake = own(await makeFake(kind, { lora: false }));
    const loraDir = dir();
    const engine = own(makeEngine(kind, fake.url, { loraDir }));
    try {
      await engine.updateWeights({ kind: 'lora', adapter: adapter(1) }, 1);
      assert.unreachable('should fail');
    } catch (e) {
      assert.match((e as Error).message, /LoRA update to version 1 failed on every server/);
    }
    assert.is(engine.getVersion(), 0);
    assert.ok(!existsSync(join(loraDir, 'rtjob-v1')));
    const r = await engine.generate(greedy(4));
    assert.is(namedAdapter(kind, fake.generateBodies.at(-1)), undefined);
    assert.equal(r.outputVersions, [0, 0, 0, 0]);
  });

  test('a server that fails the load is taken out, then rejoins with the current adapter', async () => {
    const [a, b] = [own(await makeFake(kind)), own(await makeFake(kind))];
    const engine = own(
      makeEngine(kind, a.url, { urls: [a.url, b.url], loraDir: dir(), healthIntervalMs: 50 }),
    );
    const load = kind === 'sglang' ? '/load_lora_adapter' : '/v1/load_lora_adapter';
    b.injectFault(load, { kind: 'status', status: 500 });
    const down = nextEvent(engine, 'server-down');
    const up = nextEvent(engine, 'server-up');
    const a1 = adapter(1);
    await engine.updateWeights({ kind: 'lora', adapter: a1 }, 1);
    assert.is((await down).url, b.url);
    assert.equal([...a.adapters.keys()], ['rtjob-v1']);
    assert.is((await up).url, b.url);
    assert.equal([...b.adapters.keys()], ['rtjob-v1']);
    const rs = await Promise.all(
      Array.from({ length: 4 }, (_, i) => engine.generate({ ...greedy(6), rid: `r${i}` })),
    );
    assert.ok(b.generateBodies.length > 0, 'b serves again');
    for (const body of [...a.generateBodies, ...b.generateBodies].slice(-2))
      assert.is(namedAdapter(kind, body), 'rtjob-v1');
    for (const r of rs) assert.equal(r.outputTokens, await expected(a, a1, prompt, 6));
  });

  test('without loraDir a LoRA update is refused with one line', async () => {
    const fake = own(await makeFake(kind));
    const engine = own(makeEngine(kind, fake.url, {}));
    try {
      await engine.updateWeights({ kind: 'lora', adapter: adapter(1) }, 1);
      assert.unreachable('should fail');
    } catch (e) {
      assert.match((e as Error).message, /set loraDir/);
    }
  });

  test('the fake refuses what the real server refuses: unknown names, a name taken', async () => {
    const fake = own(await makeFake(kind));
    const engine = own(makeEngine(kind, fake.url, { loraDir: dir() }));
    await engine.updateWeights({ kind: 'lora', adapter: adapter(1) }, 1);
    const gen =
      kind === 'sglang'
        ? {
            path: '/generate',
            body: { input_ids: prompt, lora_path: 'nope', return_logprob: true },
          }
        : { path: '/v1/completions', body: { prompt, model: 'nope', logprobs: 0 } };
    await assertStatus(
      httpCall(fake.url + gen.path, gen.body, { timeoutMs: 5000 }),
      kind === 'sglang' ? 400 : 404,
      /nope/,
    );
    const load = kind === 'sglang' ? '/load_lora_adapter' : '/v1/load_lora_adapter';
    const unload = kind === 'sglang' ? '/unload_lora_adapter' : '/v1/unload_lora_adapter';
    const path = fake.adapters.get('rtjob-v1')!.path;
    await assertStatus(
      httpCall(fake.url + load, { lora_name: 'rtjob-v1', lora_path: path }, { timeoutMs: 5000 }),
      400,
      /already been loaded/,
    );
    await assertStatus(
      httpCall(fake.url + unload, { lora_name: 'nope' }, { timeoutMs: 5000 }),
      kind === 'sglang' ? 400 : 404,
      /cannot be found/,
    );
    await assertStatus(
      httpCall(fake.url + load, { lora_name: 'x', lora_path: '/no/such/dir' }, { timeoutMs: 5000 }),
      400,
      /not found/,
    );
  });

  test('full weights after adapters: the adapters are unloaded, requests name none', async () => {
    const fake = own(await makeFake(kind));
    const ckpt = dir();
    const { writeFakeCheckpoint } = await import('./fake-fixtures.ts');
    writeFakeCheckpoint(ckpt, 3);
    const engine = own(
      makeEngine(kind, fake.url, {
        loraDir: dir(),
        ...(kind === 'vllm' ? { reload: 'areal' as const } : {}),
      }),
    );
    await engine.updateWeights({ kind: 'lora', adapter: adapter(1) }, 1);
    await engine.updateWeights({ kind: 'disk', path: ckpt }, 2);
    await fake.waitFor(() => fake.adapters.size === 0);
    assert.equal(engine.loadedAdapters(), []);
    await engine.generate(greedy(4));
    assert.is(namedAdapter(kind, fake.generateBodies.at(-1)), undefined);
  });

  test.run();
}

async function assertStatus(p: Promise<unknown>, status: number, message: RegExp): Promise<void> {
  try {
    await p;
    assert.unreachable(`expected ${status}`);
  } catch (e) {
    const err = e as Error & { status?: number };
    assert.is(err.status, status, err.message);
    assert.match(err.message, message);
  }
}
