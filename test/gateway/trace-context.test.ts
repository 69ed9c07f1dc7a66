// The gateway reads W3C `traceparent` on every model call: an episode's trajectories name the
// agent's trace(s) in `extraInfo.trace_id`, and an invalid header is ignored, as the
// recommendation asks of a receiver.
import OpenAI from 'openai';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runGatewayEpisode } from '../../agents/agent-executor.ts';
import type { AgentFunction, Sample } from '../../agents/types.ts';
import { parseTraceparent } from '../../gateway/trace-context.ts';
import { compactToolTemplate, scriptedEngine, startGateway, tokenizerWith } from './helpers.ts';

const tok = tokenizerWith(compactToolTemplate);
const engine = scriptedEngine(tok, () => 'ok');
const sample: Sample = {
  index: 0,
  prompt: 'hi',
  promptIds: [],
  nSamples: 1,
  groupId: 'g0',
  record: {},
};
const a = '4bf92f3577b34da6a3ce929d0e0e4736';
const b = '0af7651916cd43dd8448eb211c80319c';

test('traceparent parses as the W3C recommendation reads it', () => {
  assert.equal(parseTraceparent(`00-${a}-00f067aa0ba902b7-01`), {
    traceId: a,
    parentId: '00f067aa0ba902b7',
    sampled: true,
  });
  assert.is(parseTraceparent(`00-${b}-b7ad6b7169203331-00`)!.sampled, false);
  // A later version may add fields after the four it shares with 00.
  assert.is(parseTraceparent(`01-${a}-00f067aa0ba902b7-01-what-comes-next`)!.traceId, a);
  for (const bad of [
    undefined,
    `00-${a.toUpperCase()}-00f067aa0ba902b7-01`,
    `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`,
    `00-${a}-${'0'.repeat(16)}-01`,
    `ff-${a}-00f067aa0ba902b7-01`,
    `00-${a}-00f067aa0ba902b7-01-extra`,
    `00-${a.slice(1)}-00f067aa0ba902b7-01`,
    `00-${a}-00f067aa0ba902b7`,
  ])
    assert.is(parseTraceparent(bad), undefined, String(bad));
});

/** An agent whose calls carry the given traceparent headers, one call each. */
const tracedAgent =
  (headers: (string | undefined)[]): AgentFunction =>
  async (_sample, env) => {
    const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey, maxRetries: 0 });
    for (const traceparent of headers)
      await client.chat.completions.create(
        { model: env.model, messages: [{ role: 'user', content: 'hi' }] },
        traceparent ? { headers: { traceparent } } : {},
      );
    return 1;
  };

test("an episode's trajectories name the traces its calls carried; invalid headers are ignored", async () => {
  const gateway = await startGateway({ engine, tokenizer: tok });
  try {
    const run = (headers: (string | undefined)[]) =>
      runGatewayEpisode(sample, {
        file: 'traced-agent.ts',
        agent: tracedAgent(headers),
        gateway,
        signal: new AbortController().signal,
      });
    const two = await run([
      `00-${a}-00f067aa0ba902b7-01`,
      `00-${a}-b7ad6b7169203331-01`,
      `00-${b}-b7ad6b7169203331-01`,
    ]);
    assert.ok(two.length >= 1);
    for (const t of two) assert.is(t.info?.trace_id, `${a},${b}`);
    const none = await run([`00-${'0'.repeat(32)}-00f067aa0ba902b7-01`, undefined]);
    for (const t of none) assert.is(t.info?.trace_id, undefined);
  } finally {
    await gateway.close();
  }
});

test.run();
