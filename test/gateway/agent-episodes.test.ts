import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { EpisodeRunner } from '../../agents/episode-runner.ts';
import { loadAgent } from '../../agents/load.ts';
import type { Sample } from '../../agents/types.ts';
import { agentTokenizer } from '../../roles/rollout.ts';
import { compactToolTemplate, scriptedEngine, startGateway, tokenizerWith } from './helpers.ts';

// The third agent API as the rollout runs it: episodes of `agent(sample, env)` against a gateway,
// n per prompt, with timeouts that revoke the episode's key and free its slot.
const tok = tokenizerWith(compactToolTemplate);
const file = fileURLToPath(
  new URL('../fixtures/agents/misbehaving-gateway-agent.ts', import.meta.url),
);
const engine = scriptedEngine(tok, () => 'ok');
const sample = (index: number, prompt: string, nSamples = 2): Sample => ({
  index,
  prompt,
  promptIds: [],
  nSamples,
  groupId: `g${index}`,
  record: {},
});

async function setup(o: { episodeTimeoutMs?: number; maxConcurrent?: number } = {}) {
  const gateway = await startGateway({ engine, tokenizer: tok });
  const init = { tokenizer: agentTokenizer(tok), gconfig: {}, nSamples: 2, maxLength: 64 };
  const agent = await loadAgent(file, init);
  assert.is(agent.kind, 'agent');
  return {
    gateway,
    runner: new EpisodeRunner({
      agent,
      tokenizer: init.tokenizer,
      gconfig: {},
      maxLength: 64,
      gateway,
      ...o,
    }),
  };
}

test('each episode of the group gets its own session; trajectories carry the reward and extraInfo', async () => {
  const { gateway, runner } = await setup();
  try {
    const g = await runner.runGroup(engine, sample(3, 'hello'));
    assert.is(g.status, 'ok');
    assert.is(g.trajectories.length, 2);
    for (const t of g.trajectories) {
      assert.is(t.reward, 0.5);
      assert.is(t.groupId, 'g3');
      assert.is(t.promptIndex, 3);
      assert.equal(t.info, {
        asked: 'hello',
        gateway_completions: 1,
        gateway_trajectories: 1,
        gateway_trajectory_breaks: 0,
        gateway_bridged: 0,
        gateway_aborted: 0,
      });
      assert.is(tok.decode(t.inputIds), '<|user|>hello<|assistant|>ok<|end|>');
    }
    assert.is(gateway.openSessions, 0, 'sessions are closed with their episodes');
  } finally {
    await gateway.close();
  }
});

test('a hung agent times out: its key is revoked at once, its slot freed, the others finish', async () => {
  const { gateway, runner: r } = await setup({ episodeTimeoutMs: 150, maxConcurrent: 1 });
  try {
    const [hung, fine] = await Promise.all([
      r.runGroup(engine, sample(1, 'hang', 1)),
      r.runGroup(engine, sample(2, 'fine', 1)),
    ]);
    assert.is(hung.status, 'failed');
    assert.match(
      hung.errors[0]!,
      /misbehaving-gateway-agent\.ts: episode of prompt 1 ran past --episode-timeout \(150 ms\)/,
    );
    assert.is(fine.status, 'ok', 'the one slot was freed for the next episode');
    assert.is(gateway.openSessions, 0);
  } finally {
    await gateway.close();
  }
});

test('a bad return value is a contract error; an agent that never calls the model fails its episode', async () => {
  const { gateway, runner: r } = await setup();
  try {
    const err = await r.runGroup(engine, sample(0, 'bad', 1)).then(
      () => null,
      (e: Error) => e,
    );
    assert.match(
      err!.message,
      /misbehaving-gateway-agent\.ts: agent\(\) returned reward=high, expected a finite number/,
    );
    const none = await r.runGroup(engine, sample(1, 'nothing'));
    assert.is(none.status, 'failed');
    assert.match(none.errors[0]!, /made no model call through the gateway/);
    assert.is(gateway.openSessions, 0);
  } finally {
    await gateway.close();
  }
});

test('an agent that builds its client wrongly fails with the env.* settings it should use', async () => {
  // The openai client falls back to OPENAI_API_KEY; without one it refuses to start.
  delete process.env.OPENAI_API_KEY;
  const { gateway, runner: r } = await setup();
  try {
    const errorOf = async (prompt: string) => {
      const g = await r.runGroup(engine, sample(7, prompt, 1));
      assert.is(g.status, 'failed');
      return g.errors[0]!;
    };
    assert.match(
      await errorOf('gpt-4o'),
      /The model 'gpt-4o' does not exist; this gateway serves one model, '[^']+': pass env\.model as the model/,
    );
    assert.match(
      await errorOf('own-key'),
      /Incorrect API key provided: an agent's key is env\.apiKey, valid only while its episode runs \(build the client from env\.baseURL and env\.apiKey, not from OPENAI_API_KEY\)/,
    );
    assert.match(
      await errorOf('env-key'),
      /OPENAI_API_KEY[\s\S]*\(an agent calls the model through the gateway: build its client from env\.baseURL and env\.apiKey, and pass env\.model as the model\)/,
    );
    assert.is(gateway.openSessions, 0);
  } finally {
    await gateway.close();
  }
});

test('an agent file exporting agent and step is refused; a non-function agent too', async () => {
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-agent-'));
  const init = { tokenizer: agentTokenizer(tok), gconfig: {}, nSamples: 1, maxLength: 64 };
  writeFileSync(
    join(dir, 'both.ts'),
    'export const agent = async () => 1;\nexport const step = async () => ({ reward: 0, done: true });\n',
  );
  writeFileSync(join(dir, 'num.ts'), 'export const agent = 3;\n');
  const e1 = await loadAgent(join(dir, 'both.ts'), init).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(e1!.message, /both\.ts: exports `step` and `agent`; export one of them/);
  const e2 = await loadAgent(join(dir, 'num.ts'), init).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(e2!.message, /num\.ts: `agent` is a number, expected a function \(sample, env\)/);
});

test.run();
