import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { loadAgent } from '../../agents/load.ts';
import { EpisodeRunner } from '../../agents/episode-runner.ts';
import { SimulatedEngine } from '../../engines/simulated/simulated-engine.ts';
import type { Sample, WorkflowInit } from '../../agents/types.ts';
import { charTokenizer } from '../fixtures/agents/char-tokenizer.ts';

const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));
const init: WorkflowInit = {
  tokenizer: charTokenizer,
  gconfig: { maxNewTokens: 8 },
  nSamples: 2,
  maxLength: 64,
};

function sample(index: number, label = '42', nSamples = 2): Sample {
  const prompt = `Q${index}:`;
  return {
    index,
    prompt,
    label,
    promptIds: charTokenizer.encode(prompt),
    nSamples,
    groupId: `g${index}`,
    record: {},
  };
}

/** Answers "7" on the first turn of an episode and "42" after feedback. */
function answeringEngine(): SimulatedEngine {
  return new SimulatedEngine({
    respond: (ids) =>
      charTokenizer.encode(charTokenizer.decode(ids).includes('wrong') ? '42' : '7'),
    logprob: -0.5,
  });
}

test('step function: multi-turn feedback is appended as masked tokens and rewards are summed', async () => {
  const agent = await loadAgent(fixture('multi-turn-step.ts'), init);
  assert.is(agent.kind, 'step');
  const runner = new EpisodeRunner({
    agent,
    tokenizer: charTokenizer,
    gconfig: { maxNewTokens: 8 },
    maxLength: 64,
  });
  const g = await runner.runGroup(answeringEngine(), sample(5));
  assert.is(g.status, 'ok');
  assert.is(g.trajectories.length, 2);
  const t = g.trajectories[0]!;
  const text = charTokenizer.decode(t.inputIds);
  assert.is(text, 'Q5:7 wrong, try again.42');
  const masked = t.inputIds.filter((_, i) => t.lossMask[i] === 1);
  assert.is(charTokenizer.decode(masked), '742');
  assert.ok(t.logprobs.every((lp, i) => (t.lossMask[i] ? lp === -0.5 : lp === 0)));
  assert.ok(t.versions.every((v, i) => (t.lossMask[i] ? v === 0 : v === -1)));
  assert.is(t.reward, 0.75);
  assert.is(t.groupId, 'g5');
  assert.is(t.promptIndex, 5);
  assert.equal(t.info, { turns: 2 });
  assert.is(t.truncated, false);
});

test('step function: per-episode state is fresh and the turn cap ends an endless episode', async () => {
  const agent = await loadAgent(fixture('never-done-step.ts'), init);
  const runner = new EpisodeRunner({
    agent,
    tokenizer: charTokenizer,
    gconfig: { maxNewTokens: 4 },
    maxLength: 64,
  });
  const g = await runner.runGroup(new SimulatedEngine({ respond: () => [50] }), sample(0));
  const t = g.trajectories[0]!;
  assert.is(t.reward, 1.5, 'three turns of 0.5');
  assert.is(t.truncated, true);
  assert.is(
    charTokenizer.decode(t.inputIds),
    'Q0:/?/?/',
    'nextObservation suffix appended; trailing feedback dropped',
  );
});

test('step function: the context budget cuts the episode', async () => {
  const agent = await loadAgent(fixture('never-done-step.ts'), init);
  const runner = new EpisodeRunner({
    agent,
    tokenizer: charTokenizer,
    gconfig: { maxNewTokens: 4 },
    maxLength: 6,
  });
  const g = await runner.runGroup(
    new SimulatedEngine({ respond: () => [50, 50] }),
    sample(0, '1', 1),
  );
  const t = g.trajectories[0]!;
  assert.ok(t.inputIds.length <= 6);
  assert.is(t.truncated, true);
});

test('workflow: groups come back stamped, null rejects the prompt', async () => {
  const agent = await loadAgent(fixture('group-workflow.ts'), init);
  assert.is(agent.kind, 'workflow');
  const runner = new EpisodeRunner({
    agent,
    tokenizer: charTokenizer,
    gconfig: { maxNewTokens: 8 },
    maxLength: 64,
  });
  const engine = new SimulatedEngine({ respond: () => [10, 11, 12] });
  const even = await runner.runGroup(engine, sample(4, '1', 3));
  assert.is(even.status, 'ok');
  assert.is(even.trajectories.length, 3);
  assert.ok(
    even.trajectories.every((t) => t.groupId === 'g4' && t.promptIndex === 4 && t.reward === 3),
  );
  const odd = await runner.runGroup(engine, sample(3, '1', 3));
  assert.is(odd.status, 'rejected');
});

test('broken agent files fail with errors that name the file and the problem', async () => {
  const cases: [string, RegExp][] = [
    ['no-export.ts', /no-export\.ts: exports none of `step`.*notAnAgent/],
    ['broken-syntax.mjs', /broken-syntax\.mjs: failed to import: SyntaxError/],
    ['does-not-exist.ts', /does-not-exist\.ts: no such file/],
    ['.', /is a directory: give the agent module itself/],
    ['default-export.ts', /default-export\.ts: has a default export.*export async function agent/],
  ];
  for (const [name, re] of cases) {
    const err = await loadAgent(fixture(name), init).then(
      () => null,
      (e: Error & { code?: string }) => e,
    );
    assert.ok(err, `${name} should fail`);
    assert.match(err!.message, re);
    assert.is((err as { code?: string }).code, 'AGENT_LOAD_FAILED');
  }
});

test('a wrong return shape is a contract error naming the field', async () => {
  const agent = await loadAgent(fixture('bad-return-step.ts'), init);
  const runner = new EpisodeRunner({ agent, tokenizer: charTokenizer, gconfig: {}, maxLength: 64 });
  const err = await runner.runGroup(answeringEngine(), sample(0)).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(
    err!.message,
    /bad-return-step\.ts: step\(\) returned reward=high, expected a finite number/,
  );
  const wf = await loadAgent(fixture('bad-workflow.ts'), init);
  const r2 = new EpisodeRunner({ agent: wf, tokenizer: charTokenizer, gconfig: {}, maxLength: 64 });
  const err2 = await r2.runGroup(answeringEngine(), sample(0)).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(
    err2!.message,
    /bad-workflow\.ts: runEpisode\(\) trajectory 0: lossMask has 2 entries, inputIds has 3/,
  );
});

test('episodes that throw fail their group and are reported, others go on', async () => {
  const agent = await loadAgent(fixture('flaky-step.ts'), init);
  const runner = new EpisodeRunner({ agent, tokenizer: charTokenizer, gconfig: {}, maxLength: 64 });
  const engine = answeringEngine();
  const groups = await Promise.all([0, 1, 2, 3].map((i) => runner.runGroup(engine, sample(i))));
  assert.equal(
    groups.map((g) => g.status),
    ['failed', 'ok', 'failed', 'ok'],
  );
  assert.match(
    groups[0]!.errors[0]!,
    /flaky-step\.ts: episode of prompt 0 threw Error: environment crashed on 0/,
  );
});

test('a hung episode times out, frees its slot, and the rest finish', async () => {
  const agent = await loadAgent(fixture('hang-step.ts'), init);
  const runner = new EpisodeRunner({
    agent,
    tokenizer: charTokenizer,
    gconfig: {},
    maxLength: 64,
    maxConcurrent: 2,
    episodeTimeoutMs: 200,
  });
  const engine = answeringEngine();
  const groups = await Promise.all(
    [0, 1, 2].map((i) => runner.runGroup(engine, sample(i, '1', 1))),
  );
  assert.equal(
    groups.map((g) => g.status),
    ['ok', 'failed', 'ok'],
  );
  assert.match(groups[1]!.errors[0]!, /episode-timeout/);
  assert.is(runner.running, 0);
});

test('at most maxConcurrent episodes run at once', async () => {
  const agent = await loadAgent(fixture('multi-turn-step.ts'), init);
  let live = 0;
  let peak = 0;
  const engine = new SimulatedEngine({
    respond: () => charTokenizer.encode('42'),
    tokenLatencyMs: 2,
  });
  const generate = engine.generate.bind(engine);
  engine.generate = async (req) => {
    peak = Math.max(peak, ++live);
    try {
      return await generate(req);
    } finally {
      live--;
    }
  };
  const runner = new EpisodeRunner({
    agent,
    tokenizer: charTokenizer,
    gconfig: {},
    maxLength: 64,
    maxConcurrent: 3,
  });
  const groups = await Promise.all(
    Array.from({ length: 8 }, (_, i) => runner.runGroup(engine, sample(i, '42', 2))),
  );
  assert.ok(groups.every((g) => g.status === 'ok'));
  assert.is(peak, 3);
});

test.run();
