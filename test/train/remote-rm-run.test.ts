/**
 * `train_ppo --remote-rm-url`: every answer is scored by a reward service the test starts (real
 * HTTP, OpenRLHF's shape), the run trains on those rewards, and a prompt whose requests fail has
 * its episodes counted as failed and its group dropped, as an agent that threw.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlagError, parseTrainPpoFlags, trainPpo } from '../../train/ppo/main.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { startRewardServer, type RewardRequest } from '../rewards/fixtures/reward-server.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-remote-rm-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('--remote-rm-url takes http(s) URLs and no agent file', () => {
  const o = parseTrainPpoFlags(['--remote_rm_url', 'http://a:5000/get_reward,http://b:5000/']);
  assert.is(o.remoteRmUrl, 'http://a:5000/get_reward,http://b:5000/');
  const fails = (argv: string[], re: RegExp) => {
    try {
      parseTrainPpoFlags(argv);
      assert.unreachable(`${argv.join(' ')} parsed`);
    } catch (e) {
      assert.instance(e, FlagError);
      assert.match((e as Error).message, re);
    }
  };
  fails(['--remote-rm-url', 'reward_func.py'], /is not an http\(s\) URL.*--agent-func/);
  fails(['--remote-rm-url', 'http://a/x', '--agent-func', 'a.ts'], /drop --agent-func/);
});

test('a run trains on the service’s rewards; failed requests fail their episodes', async () => {
  let failPrompt: string | undefined;
  const given: { req: RewardRequest; reward?: number }[] = [];
  const server = await startRewardServer((req) => {
    failPrompt ??= req.prompts[0];
    if (req.prompts[0] === failPrompt) {
      given.push({ req });
      return { status: 500, body: { error: 'no reward for this one' } };
    }
    // The answer's length in characters, odd or even.
    const reward = (req.query[0]!.length - req.prompts[0]!.length) % 2;
    given.push({ req, reward });
    return { status: 200, body: { rewards: [reward], extra_logs: { rm_calls: [1] } } };
  });
  const rows: { step: number; values: Record<string, number> }[] = [];
  const lines: string[] = [];
  try {
    const s = await trainPpo(
      tinyRunArgs(model, join(root, 'out'), {
        'in-process': true,
        'max-steps': 2,
        'remote-rm-url': server.url,
        'remote-rm-batch-size': 1,
        'remote-rm-retries': 0,
        'agent-error-budget': 0.5,
      }),
      {},
      {
        log: {
          line: (t) => void lines.push(t),
          metric: (step, values) => void rows.push({ step, values }),
        },
      },
    );
    assert.is(s.steps, 2);
    assert.ok(
      lines.some((l) => l.includes(`<remote reward ${server.url}>`)),
      'the run names its reward',
    );
    // 2 steps × 4 prompts × 2 samples, one request each, nothing retried.
    assert.is(server.requests.length, 16);
    for (const r of server.requests) {
      assert.is(r.query.length, 1);
      assert.ok(r.query[0]!.startsWith(r.prompts[0]!), 'the query is the prompt, then the answer');
      assert.ok(r.query[0]!.length > r.prompts[0]!.length, 'with an answer');
      assert.type(r.labels[0], 'string');
    }
    const step1 = rows.find((r) => r.step === 1 && r.values.reward_mean !== undefined)!.values;
    assert.is(step1.episodes_failed, 2, "the failing prompt's two episodes");
    assert.is(step1.groups_dropped, 1);
    // Step 1 is the first 8 requests (sync: all of step 1 finishes before step 2 starts).
    const scored = given.slice(0, 8).filter((g) => g.reward !== undefined);
    assert.is(scored.length, 6);
    const want = scored.reduce((a, g) => a + g.reward!, 0) / scored.length;
    assert.ok(
      Math.abs(step1.reward_mean! - want) < 1e-12,
      `reward_mean ${step1.reward_mean} vs ${want}`,
    );
  } finally {
    await server.close();
  }
});

test.run();
