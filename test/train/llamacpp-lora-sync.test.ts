/**
 * `train_ppo --engine llamacpp --lora-rank` end to end in one process: every weight version
 * reaches llama.cpp as a LoRA adapter (one adapter update per version, one adapter GGUF beside the
 * base at a time), the base GGUF's bytes are never rewritten, each token is labelled with the
 * version that computed it, and the engine computes what the trainer's base + adapter computes
 * (the trainer/engine logprob gap stays at f32 noise after the adapter moved the policy).
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import type { GenerateRequest, WeightUpdate } from '../../engines/types.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { llamaCppMissing } from '../engines/llamacpp-fixture.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const missing = await llamaCppMissing();
const sha = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

/** What the run's llama.cpp engines saw, recorded by wrapping the engine class's methods. */
interface Seen {
  /** Each weight update: its kind, version, and the GGUF directory's files just after it. */
  updates: { kind: WeightUpdate['kind']; version: number; files: string[] }[];
  /** The base GGUF's SHA-256 when the engine was made and when it closed. */
  baseAtStart: string[];
  baseAtClose: string[];
  /** The versions labelling each generated token, per request of the run. */
  tokenVersions: number[][];
  /** A fixed greedy request's logprobs on the base, then after each update. */
  probes: number[][];
}

const probe: GenerateRequest = {
  inputIds: [3, 5, 7, 9],
  gconfig: { maxNewTokens: 8, greedy: true },
};
const maxDiff = (a: number[], b: number[]) => Math.max(0, ...a.map((x, i) => Math.abs(x - b[i]!)));

async function watchLlamaCpp(): Promise<{ seen: Seen; restore: () => void }> {
  const { LlamaCppEngine } = await import('../../engines/llamacpp/index.ts');
  const seen: Seen = {
    updates: [],
    baseAtStart: [],
    baseAtClose: [],
    tokenVersions: [],
    probes: [],
  };
  const proto = LlamaCppEngine.prototype;
  const { create } = LlamaCppEngine;
  const { updateWeights, generate, close } = proto;
  LlamaCppEngine.create = async function (...args) {
    const e = await create.apply(this, args);
    seen.baseAtStart.push(sha(e.layout.path));
    seen.probes.push((await generate.call(e, probe)).outputLogprobs);
    return e;
  };
  proto.updateWeights = async function (update, version) {
    await updateWeights.call(this, update, version);
    const dir = dirname(this.layout.path);
    const base = basename(this.layout.path);
    seen.updates.push({
      kind: update.kind,
      version,
      files: readdirSync(dir).map((f) => f.replace(base, 'BASE')),
    });
    seen.probes.push((await generate.call(this, probe)).outputLogprobs);
  };
  proto.generate = async function (req) {
    const r = await generate.call(this, req);
    seen.tokenVersions.push([...r.outputVersions]);
    return r;
  };
  proto.close = async function () {
    seen.baseAtClose.push(sha(this.layout.path));
    return close.call(this);
  };
  return {
    seen,
    restore: () => {
      LlamaCppEngine.create = create;
      Object.assign(proto, { updateWeights, generate, close });
    },
  };
}

if (missing) {
  test('node-llama-cpp loads', () => assert.unreachable(missing));
} else {
  test('a LoRA policy on llama.cpp: one adapter per version over an unchanged base, tokens labelled', async () => {
    const root = mkdtempSync(join(tmpdir(), 'rtjob-llamacpp-lora-'));
    const { seen, restore } = await watchLlamaCpp();
    const rows: Record<string, number>[] = [];
    try {
      const model = await writeTinyModel(root);
      const steps = 3;
      const s = await trainPpo(
        tinyRunArgs(model, join(root, 'out'), {
          'in-process': true,
          // Rewards that vary within a group under a random policy, so every step has a gradient.
          'agent-func': fileURLToPath(
            new URL('../fixtures/agents/parity-step.ts', import.meta.url),
          ),
          engine: 'llamacpp',
          'lora-rank': 4,
          'lora-alpha': 8,
          // Large enough that one step's adapter moves the logprobs well past f32 noise.
          'actor-learning-rate': 0.05,
          // The trainer recomputes the batch's logprobs: logprob_gap compares them with the engine's.
          'is-correction': 'tis',
          'max-steps': steps,
          'rollout-batch-size': 2,
          'train-batch-size': 4,
          'micro-train-batch-size': 4,
          'generate-max-len': 8,
        }),
        {},
        { log: { line: () => undefined, metric: (_s, v) => void rows.push(v) } },
      );
      assert.is(s.steps, steps);
      const stepRows = rows.filter((r) => r.reward_mean !== undefined);
      assert.equal(
        stepRows.map((r) => r.version),
        [1, 2, 3],
      );

      // One engine, one adapter update per version, never full weights.
      assert.is(seen.baseAtStart.length, 1, 'one llama.cpp engine');
      assert.equal(
        seen.updates.map((u) => [u.kind, u.version]),
        [
          ['lora', 1],
          ['lora', 2],
          ['lora', 3],
        ],
      );
      // After each update: the base GGUF and exactly one adapter GGUF (the one before it freed).
      for (const u of seen.updates) {
        const adapters = u.files.filter((f) => /^BASE\.lora-\d+\.gguf$/.test(f));
        assert.is(adapters.length, 1, `v${u.version}: ${u.files.join(', ')}`);
        assert.ok(u.files.includes('BASE'), `v${u.version}: ${u.files.join(', ')}`);
      }
      // The base weights on the engine were never rewritten.
      assert.equal(seen.baseAtClose, seen.baseAtStart, 'the base GGUF is unchanged');

      // Every token carries the version of the weights that computed it: in the sync loop step
      // k generates on version k-1 (staleness 0) ...
      assert.equal(
        stepRows.map((r) => r.staleness_max),
        [0, 0, 0],
      );
      const versions = new Set(seen.tokenVersions.flat());
      assert.equal([...versions].sort(), [0, 1, 2], 'steps 1-3 generate on versions 0-2');
      // ... and what the engine computed under that label is what the trainer's base + adapter
      // of that version computes: f32 noise, once the adapter has moved the policy.
      const gaps = stepRows.map((r) => r.logprob_gap!);
      assert.ok(
        gaps.every((g) => Number.isFinite(g) && g < 1e-4),
        `trainer/engine logprob gap per step: ${gaps.join(', ')}`,
      );
      // The adapters did move the policy (else the gap above proves nothing): a fixed greedy
      // request's logprobs on the engine after each update, against the base's.
      const moved = seen.probes.slice(1).map((p) => maxDiff(p, seen.probes[0]!));
      assert.ok(
        moved.every((d) => d > 1e-2),
        `max |Δ logprob| of v1.. vs v0: ${moved.join(', ')}`,
      );
    } finally {
      restore();
      rmSync(root, { recursive: true, force: true });
    }
  });
}

test.run();
