// A step's sample episodes and episode metrics: which episodes are kept (best, worst, random),
// how a trajectory is split into turns with tool calls, the standard per-step metrics, and a real
// train_ppo run (step function, gateway agent) that logs samples with extraInfo, versions and turns.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import type { GroupResult } from '../../agents/episode-runner.ts';
import { resolveOptions, runName, trainPpo } from '../../train/ppo/main.ts';
import {
  episodeTurns,
  groupReport,
  pickSamples,
  type EpisodeSample,
  type GroupReport,
} from '../../roles/episode-report.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { episodeMetrics, sampleEpisodes } from '../../train/ppo/episodes.ts';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import { tinyRunArgs, writeTinyModel, type FlagValue } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-episodes-'));
let model = '';
const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

/** Token i decodes to `<i>`, so turn texts show exactly which ids they hold. */
const decode = (ids: number[]) => ids.map((i) => `<${i}>`).join('');

/** A group as its rollout reports it (samples described with `samples` > 0). */
const report = (g: GroupResult, samples = 0, d = decode): GroupReport =>
  groupReport(g, {
    decode: d,
    prompt: `prompt ${g.index}`,
    label: `#### ${g.index}`,
    samples,
  });

function traj(reward: number, mask: number[], extra: Partial<Trajectory> = {}): Trajectory {
  return {
    inputIds: mask.map((_, i) => i),
    lossMask: mask,
    logprobs: mask.map(() => 0),
    versions: mask.map((m) => (m ? 3 : -1)),
    reward,
    groupId: 'g',
    promptIndex: 7,
    truncated: false,
    ...extra,
  };
}

test('pickSamples keeps the best and the worst quarter and a seeded random draw of the rest', () => {
  const rewards = [0.5, 1, 0, 0.2, 0.9, 0.1, 0.7, 0.3];
  const picks = pickSamples(rewards, 4, 1);
  assert.equal(picks.slice(0, 2), [
    { index: 1, pick: 'best' },
    { index: 2, pick: 'worst' },
  ]);
  assert.ok(picks.slice(2).every((p) => p.pick === 'random'));
  assert.is(new Set(picks.map((p) => p.index)).size, 4, 'no episode twice');
  assert.equal(pickSamples(rewards, 4, 1), picks, 'the same seed picks the same episodes');
  assert.is(pickSamples(rewards, 100, 1).length, 8, 'never more than there are');
  assert.equal(pickSamples(rewards, 0, 1), []);
  const ties = pickSamples([1, 0, 0, 0, 1, 0, 0, 0], 8, 1);
  assert.equal(
    ties.filter((p) => p.pick === 'best').map((p) => p.index),
    [0, 4],
    'reward-0 episodes are never "best"',
  );
  assert.equal(
    ties.filter((p) => p.pick === 'worst').map((p) => p.index),
    [7, 6],
  );
  assert.ok(
    pickSamples([0.5, 0.5, 0.5], 3, 1).every((p) => p.pick === 'random'),
    'all equal: no best or worst',
  );
});

test('episodeTurns splits by the loss mask: assistant turns, tool results after a call, environment feedback', () => {
  const call = '<tool_call>{"name": "calc", "arguments": {"x": 2}}</tool_call>';
  const texts: Record<string, string> = { '2,3': call, '6': 'answer 4' };
  const t = traj(1, [0, 0, 1, 1, 0, 0, 1, 0, 1]);
  const { turns, promptTokens, responseTokens } = episodeTurns(t, {
    decode: (ids) => texts[ids.join(',')] ?? decode(ids),
  });
  assert.is(promptTokens, 2);
  assert.is(responseTokens, 4);
  assert.equal(
    turns.map((x) => [x.role, x.text, x.tokens]),
    [
      ['assistant', call, 2],
      ['tool', '<4><5>', 2],
      ['assistant', 'answer 4', 1],
      ['environment', '<7>', 1],
      ['assistant', '<8>', 1],
    ],
  );
  assert.equal(turns[0]!.toolCalls, [{ name: 'calc', arguments: '{"x":2}' }]);
});

test('episodeMetrics: generated tokens, reward std, groups with no spread, lengths, length-capped fraction, extraInfo means', () => {
  const g = (rewards: number[], truncated = false, info?: Trajectory['info']): GroupResult => ({
    index: 0,
    groupId: 'g',
    status: 'ok',
    errors: [],
    episodes: rewards.length,
    trajectories: rewards.map((r, i) =>
      traj(r, i === 0 ? [0, 1, 1, 1] : [0, 1], { truncated, ...(info ? { info } : {}) }),
    ),
  });
  const failed: GroupResult = {
    index: 1,
    groupId: 'f',
    status: 'failed',
    errors: ['boom'],
    episodes: 2,
    trajectories: [],
  };
  const m = episodeMetrics(
    [
      g([1, 1], false, { solved: true, turns: 2, note: 'x' }),
      g([0, 1], true, { solved: false, turns: 4 }),
      failed,
    ].map((x) => report(x)),
  );
  assert.is(m.tokens, 3 + 1 + 3 + 1, 'generated tokens of the episodes that finished');
  assert.is(m.reward_std, Math.sqrt(0.1875));
  assert.is(m.zero_std_groups, 0.5);
  assert.is(m.response_length_max, 3);
  assert.is(m.response_clip_ratio, 0.5);
  assert.is(m['info/solved'], 0.5);
  assert.is(m['info/turns'], 3);
  assert.is(m['info/note'], undefined, 'strings are not metrics');
  assert.is(m.trajectory_breaks, undefined, 'no gateway agent, no breaks metric');
});

test('episodeMetrics: trajectory_breaks counts each gateway episode once, however many trajectories it split into', () => {
  const episode = (breaks: number, trajectories: number) =>
    Array.from({ length: trajectories }, () =>
      traj(1, [0, 1], {
        info: { gateway_trajectory_breaks: breaks, gateway_trajectories: trajectories },
      }),
    );
  const m = episodeMetrics([
    report({
      index: 0,
      groupId: 'g',
      status: 'ok',
      errors: [],
      episodes: 3,
      trajectories: [...episode(2, 3), ...episode(0, 1), ...episode(1, 2)],
    }),
  ]);
  assert.is(m.trajectory_breaks, 3);
  assert.is(m.version_span_max, 0, 'every trained token of version 3');
});

test('episodeMetrics: version_span_max is the widest spread of versions within one trained sequence', () => {
  const withVersions = (versions: number[]) =>
    traj(1, [0, 1, 1, 0, 1], { versions: [9, ...versions.slice(0, 2), 9, versions[2]!] });
  const m = episodeMetrics([
    report({
      index: 0,
      groupId: 'g',
      status: 'ok',
      errors: [],
      episodes: 2,
      // Masked positions (prompt, tool results) do not count, whatever version they carry.
      trajectories: [withVersions([4, 4, 5]), withVersions([2, 4, 4])],
    }),
  ]);
  assert.is(m.version_span_max, 2);
});

test('sampleEpisodes describes each kept episode and adds failed ones with their error', () => {
  const ok: GroupResult = {
    index: 7,
    groupId: 'e0-p7',
    status: 'ok',
    errors: [],
    episodes: 2,
    trajectories: [
      traj(1, [0, 1, 1], { versions: [-1, 2, 3], info: { solved_turn: 1 } }),
      traj(0, [0, 1, 1], { truncated: true }),
    ],
  };
  const failed: GroupResult = {
    index: 9,
    groupId: 'e0-p9',
    status: 'failed',
    errors: ['agent x: episode threw Error: boom'],
    episodes: 2,
    trajectories: [],
  };
  // The rollout describes its group (decoded, tool calls parsed); the driver only picks.
  const s = sampleEpisodes([report(ok, 16), report(failed, 16)], 16, {
    trainerVersion: 4,
    seed: 0,
  });
  assert.is(s.length, 3);
  const best = s[0]!;
  assert.equal(
    {
      key: best.key,
      pick: best.pick,
      score: best.score,
      prompt: best.prompt,
      label: best.label,
      versionMin: best.versionMin,
      versionMax: best.versionMax,
      staleness: best.staleness,
      stopReason: best.stopReason,
      extraInfo: best.extraInfo,
    },
    {
      key: '7',
      pick: 'best',
      score: 1,
      prompt: 'prompt 7',
      label: '#### 7',
      versionMin: 2,
      versionMax: 3,
      staleness: 2,
      stopReason: 'stop',
      extraInfo: { solved_turn: 1 },
    },
  );
  assert.equal([best.promptTokens, best.responseTokens, best.groupScoreMean], [1, 2, 0.5]);
  assert.is(s[1]!.stopReason, 'length');
  assert.equal(
    [s[2]!.pick, s[2]!.key, s[2]!.error],
    ['failed', '9', 'agent x: episode threw Error: boom'],
  );
  const long = sampleEpisodes(
    [
      report({ ...ok, trajectories: [traj(1, [0, 1], { inputIds: [0, 1] })] }, 1, () =>
        'y'.repeat(10_000),
      ),
    ],
    1,
    { seed: 0 },
  );
  assert.equal(
    sampleEpisodes([report(ok, 0)], 16, { seed: 0 }),
    [],
    'a rollout asked for no samples describes none',
  );
  assert.ok(
    long[0]!.turns[0]!.text.length < 4200 && /characters cut/.test(long[0]!.turns[0]!.text),
    'long turns are cut in the middle',
  );
});

const tiny = (extra: string[], flags: Record<string, FlagValue> = {}): string[] => [
  ...tinyRunArgs(model, join(root, 'out'), {
    'in-process': true,
    'rollout-batch-size': 2,
    'train-batch-size': 4,
    'micro-train-batch-size': 4,
    'generate-max-len': 6,
    'max-steps': 2,
    'ckpt-path': join(root, 'ckpt'),
    ...flags,
  }),
  ...extra,
];

async function run(argv: string[]) {
  const samples: { step: number; samples: EpisodeSample[] }[] = [];
  const rows: { step: number; values: Record<string, number> }[] = [];
  const reports: object[] = [];
  const summary = await trainPpo(
    argv,
    {},
    {
      log: {
        line: () => undefined,
        metric: (step, values) => void rows.push({ step, values }),
        samples: (step, s) => void samples.push({ step, samples: s }),
        report: (r) => void reports.push(r),
      },
    },
  );
  return { summary, samples, rows, reports };
}

test("train_ppo logs each step's sample episodes with turns, extraInfo and versions (multi-turn step function)", async () => {
  const { samples, rows, reports } = await run(
    tiny(['--agent-func', fixture('multi-turn-step.ts'), '--log-samples', '3']),
  );
  const report = Object.assign({}, ...reports) as {
    totalSteps: number;
    headline: string;
    config: { name: string; value: string; source: string }[];
    outputs: Record<string, string>;
  };
  assert.is(report.totalSteps, 2, 'the job page learns the total steps');
  assert.is(report.headline, 'reward_mean', 'no eval dataset: reward is the headline');
  assert.equal(
    report.config.find((r) => r.name === '--log-samples'),
    { ...report.config.find((r) => r.name === '--log-samples')!, value: '3', source: 'flag' },
  );
  assert.is(report.outputs.policy, join(root, 'out'));
  assert.is(report.outputs.checkpoints, undefined, 'no --save-steps: no checkpoints written');
  // Each role's backend, device and precision, as the run's `roles:` line says, in its Config.
  const roleRows = report.config.filter((r) => r.source === 'run');
  assert.equal(
    roleRows.map((r) => r.name),
    ['trainer', 'rollout-0'],
  );
  assert.match(roleRows[0]!.value, /^(wasm|cpu|torch|tensorflow)\b/);
  assert.match(roleRows[1]!.value, /^builtin engine on /);
  assert.equal(
    samples.map((s) => s.step),
    [1, 2],
  );
  for (const { samples: list } of samples) {
    assert.is(list.length, 3, '--log-samples 3 of the 4 episodes');
    for (const s of list) {
      assert.ok(s.prompt.length > 0 && /^\d+$/.test(s.key));
      assert.ok(s.turns.length >= 1 && s.turns[0]!.role === 'assistant');
      assert.ok(
        s.turns
          .filter((t) => t.role === 'environment')
          .every((t) => t.text.includes('wrong, try again')),
        'feedback turns hold the environment text',
      );
      assert.is(s.staleness, 0, 'sync is on-policy');
      assert.ok(s.versionMin !== undefined && s.versionMin <= s.versionMax!);
      assert.is(
        s.responseTokens,
        s.turns.filter((t) => t.role === 'assistant').reduce((a, t) => a + t.tokens, 0),
      );
      if (s.score === 1)
        assert.ok(typeof s.extraInfo?.turns === 'number', 'extraInfo is carried through');
    }
  }
  const m = rows.find((r) => r.values.reward_std !== undefined)!.values;
  assert.ok(
    m.zero_std_groups! >= 0 &&
      m.zero_std_groups! <= 1 &&
      m.response_length_max! > 0 &&
      m.episodes === 4,
  );
});

test("--log-samples 0 keeps none; a gateway agent's samples carry its extraInfo", async () => {
  const off = await run(
    tiny(['--agent-func', fixture('multi-turn-step.ts'), '--log-samples', '0', '--max-steps', '1']),
  );
  assert.equal(off.samples, []);
  const gw = await run(tiny(['--agent-func', fixture('openai-chat-agent.ts'), '--max-steps', '1']));
  const list = gw.samples[0]!.samples;
  assert.is(list.length, 4, 'every episode when there are fewer than 16');
  assert.ok(list.every((s) => s.extraInfo?.turns === 2 && s.extraInfo.gateway_completions === 2));
  assert.ok(
    list.every((s) => s.turns.filter((t) => t.role === 'assistant').length === 2),
    'both completions are turns of one sample',
  );
  assert.ok(
    gw.rows.some((r) => r.values['info/turns'] === 2),
    'numeric extraInfo is logged as a metric',
  );
});

test('each run writes to its own folder by default, and never over another run without --overwrite', async () => {
  const o = resolveOptions(parseTrainPpoFlags([]), { RTJOB_JOB_ID: 'job-7' });
  assert.equal(
    [o.savePath, o.ckptPath],
    [join('ckpt', 'job-7'), join('ckpt', 'job-7', 'checkpoints')],
  );
  assert.match(runName({}, new Date(2026, 10, 23, 20, 5, 9)), /^run-20261123-200509$/);
  const out = join(root, 'mine');
  const argv = tiny(
    ['--agent-func', fixture('multi-turn-step.ts'), '--max-steps', '1', '--save-steps', '1'],
    { overwrite: false, 'save-path': out, 'ckpt-path': join(out, 'ck') },
  );
  await run(argv);
  const again = await run(argv).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(
    again!.message,
    /--save-path \S+mine already holds a policy from another run; pass --overwrite to replace it/,
  );
  rmSync(join(out, 'model.safetensors'));
  const ck = await run(argv).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(
    ck!.message,
    /--ckpt-path \S+ck holds another run's checkpoints; --load-checkpoint resumes from them, --overwrite replaces them/,
  );
  const replaced = await run([...argv, '--overwrite']);
  assert.is(replaced.summary.steps, 1);
});

test.run();
