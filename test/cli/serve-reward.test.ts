/**
 * `rtjob serve --reward-model DIR` as a user runs it: a real process serving a reward model
 * `train_rm` wrote, scored through rtjob's own `--remote-rm-url` client (the text train_ppo
 * sends), the served scores equal to the in-process reward role's on the same tokens; a key is
 * needed (Bearer, or in the URL), a policy without a value head is refused, and train_ppo trains
 * on the served rewards.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { RemoteRewardClient } from '../../rewards/remote.ts';
import { remoteRewardAgent } from '../../roles/reward.ts';
import { RewardModel } from '../../roles/reward-model.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { arithPreferencePairs, trainRm } from '../../train/rm.ts';
import type { StepContext } from '../../agents/types.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { binPath } from './helpers.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-serve-rm-'));
let policy = '';
let rmDir = '';
test.before(async () => {
  policy = await writeTinyModel(root);
  rmDir = join(root, 'rm');
  // A few steps: a head that is not zero, so scores differ between answers.
  await trainRm({
    pretrain: policy,
    savePath: rmDir,
    datasetSize: 32,
    evalSize: 8,
    batchSize: 8,
    microBatchSize: 8,
    maxSteps: 3,
    lr: 3e-3,
    verbose: false,
  });
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const env = { ...process.env, RTJOB_HOME: join(root, '.rtjob'), RTJOB_QUIET_BACKEND: '1' };

function serve(args: string[]): {
  child: ChildProcess;
  ready: Promise<{ url: string; apiKey: string }>;
} {
  const child = spawn(process.execPath, [binPath, 'serve', ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const ready = new Promise<{ url: string; apiKey: string }>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      out += d;
      const url = /at (http:\/\/\S+\/get_reward)\n/.exec(out);
      const key = /api key: (\S+)\n/.exec(out);
      if (url && key) resolve({ url: url[1]!, apiKey: key[1]! });
    });
    child.stderr!.on('data', (d) => (out += d));
    child.once('exit', (code) => reject(new Error(`serve exited ${code}: ${out}`)));
  });
  return { child, ready };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

test('served scores equal the reward role’s on the tokens train_ppo scored', async () => {
  const { child, ready } = serve(['--reward-model', rmDir, '--port', '0']);
  const client = { current: undefined as RemoteRewardClient | undefined };
  const rm = new RewardModel({ pretrain: rmDir });
  try {
    const { url, apiKey } = await ready;
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/get_reward$/, 'loopback by default');
    client.current = new RemoteRewardClient({ urls: [url], apiKey, retries: 0 });
    const agent = remoteRewardAgent(client.current, [url]);
    assert.is(agent.kind, 'step');
    if (agent.kind !== 'step') return;
    const tok = loadTokenizer(rmDir);
    await rm.ready();
    // Episodes as a run has them: the prompt in the chat template, then the answer's tokens
    // (ending in EOS, as a finished generation does), for chosen and rejected answers.
    const episodes = arithPreferencePairs('arith:test', 6, 5).flatMap((p) => {
      const promptIds = tok.encode(
        tok.applyChatTemplate([{ role: 'user', content: p.prompt }], {
          addGenerationPrompt: true,
        }),
      );
      return [p.chosen, p.rejected].map((answer) => ({
        promptIds,
        actionIds: [...tok.encode(answer), tok.eosTokenId!],
        label: p.chosen,
      }));
    });
    const served = await Promise.all(
      episodes.map(async (e) => {
        const ctx = {
          turn: 0,
          tokenizer: tok,
          state: {},
          sample: { prompt: '', promptIds: e.promptIds, label: e.label },
          stopReason: 'stop',
          actionIds: e.actionIds,
        } as unknown as StepContext;
        const r = await agent.step('', tok.decode(e.actionIds), e.label, ctx);
        return r.reward;
      }),
    );
    const local = await rm.scores(episodes.map((e) => [...e.promptIds, ...e.actionIds]));
    assert.is(served.length, local.length);
    served.forEach((s, i) =>
      assert.ok(
        Math.abs(s - local[i]!) < 1e-5,
        `episode ${i}: served ${s}, in-process ${local[i]}`,
      ),
    );
    assert.ok(new Set(local.map((x) => x.toFixed(6))).size > 1, `scores differ: ${local}`);
  } finally {
    client.current?.close();
    rm.dispose();
    await stop(child);
  }
});

test('a key is required: Bearer, or HTTP Basic from the URL; a wrong one fails at once', async () => {
  const { child, ready } = serve([
    '--reward-model',
    rmDir,
    '--port',
    '0',
    '--api-key',
    'k-12345678',
  ]);
  try {
    const { url, apiKey } = await ready;
    assert.is(apiKey, 'k-12345678');
    const q = { query: 'hello<|im_end|>', prompt: 'hello' };
    const noKey = new RemoteRewardClient({ urls: [url], retries: 3, retryDelayMs: 1 });
    const wrong = new RemoteRewardClient({ urls: [url], apiKey: 'nope-nope', retries: 3 });
    for (const c of [noKey, wrong]) {
      try {
        await c.score(q);
        assert.unreachable('scored without the key');
      } catch (e) {
        assert.is((e as { code?: string }).code, 'REMOTE_REWARD');
        assert.match((e as Error).message, /answered 401: .*API key/);
        assert.not.match((e as Error).message, /tries/, 'a 401 is not retried');
      }
    }
    const inUrl = url.replace('http://', 'http://rm:k-12345678@');
    const r = await new RemoteRewardClient({ urls: [inUrl], retries: 0 }).score(q);
    assert.type(r.reward, 'number');
    // The body is checked at the door: one clear 400.
    const res = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ queries: ['x'] }),
    });
    assert.is(res.status, 400);
    assert.match(((await res.json()) as { error: { message: string } }).error.message, /query/);
  } finally {
    await stop(child);
  }
});

test('a policy without a value head is refused in one line, and so are generation flags', () => {
  const noHead = spawnSync(process.execPath, [binPath, 'serve', '--reward-model', policy], {
    env,
    encoding: 'utf8',
  });
  assert.is(noHead.status, 2);
  assert.match(noHead.stderr, /has no value head: train one with train_rm/);
  assert.is(noHead.stderr.trim().split('\n').length, 1, noHead.stderr);
  const both = spawnSync(
    process.execPath,
    [binPath, 'serve', '--reward-model', rmDir, '--pretrain', policy],
    { env, encoding: 'utf8' },
  );
  assert.is(both.status, 2);
  assert.match(both.stderr, /drop --pretrain/);
});

test('train_ppo --remote-rm-url trains on the served rewards (RTJOB_REMOTE_RM_API_KEY)', async () => {
  const { child, ready } = serve(['--reward-model', rmDir, '--port', '0']);
  const rows: { step: number; values: Record<string, number> }[] = [];
  try {
    const { url, apiKey } = await ready;
    process.env.RTJOB_REMOTE_RM_API_KEY = apiKey;
    const s = await trainPpo(
      tinyRunArgs(policy, join(root, 'ppo'), {
        'in-process': true,
        'max-steps': 1,
        'remote-rm-url': url,
        'remote-rm-retries': 0,
      }),
      {},
      { log: { line: () => {}, metric: (step, values) => void rows.push({ step, values }) } },
    );
    assert.is(s.steps, 1);
    assert.is(s.episodesFailed, 0, 'every episode scored by the server');
    const step1 = rows.find((r) => r.step === 1 && r.values.reward_mean !== undefined)!.values;
    // Reward model scores, not the math reward's 0/1.
    assert.ok(
      Number.isFinite(step1.reward_mean) && step1.reward_mean !== 0 && step1.reward_mean !== 1,
      `reward_mean ${step1.reward_mean}`,
    );
  } finally {
    delete process.env.RTJOB_REMOTE_RM_API_KEY;
    await stop(child);
  }
});

test.run();
