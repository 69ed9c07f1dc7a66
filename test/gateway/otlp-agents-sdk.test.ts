// An OpenAI Agents SDK agent's trace reaches the gateway through the SDK's own tracing: its
// `BatchTraceProcessor` with its `OpenAITracingExporter` pointed at the episode's base URL
// (`/traces/ingest`), each run's spans sent with that run's key (`tracing: { apiKey }`). Its
// agent, turn, model and function spans join the episode's completions as an OpenTelemetry trace
// does, through both of the SDK's model APIs, and its token counts are checked against the
// gateway's.
import {
  Agent,
  BatchTraceProcessor,
  getGlobalTraceProvider,
  OpenAIProvider,
  OpenAITracingExporter,
  Runner,
  setTraceProcessors,
  tool,
} from '@openai/agents';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { z } from 'zod';
import { runGatewayEpisode } from '../../agents/agent-executor.ts';
import type { AgentFunction } from '../../agents/types.ts';
import { spansFromAgentsSdk } from '../../gateway/agents-sdk-traces.ts';
import { traceLines, traceTree, usageMismatch, type TraceNode } from '../../runtime/agent-trace.ts';
import {
  addSample,
  addToolModel,
  compactToolTemplate,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

const tok = tokenizerWith(compactToolTemplate);
const { engine } = addToolModel(tok);
const gateway = suiteGateway(test, { engine, tokenizer: tok });
const sample = addSample();

// What an agent file sets up once: the SDK's exporter, sending to the gateway. Every episode's
// gateway has the same base URL; the key is each run's own.
test.before(() => {
  setTraceProcessors([
    new BatchTraceProcessor(
      new OpenAITracingExporter({ endpoint: `${gateway.gw.baseURL}/traces/ingest` }),
    ),
  ]);
});
test.after(() => setTraceProcessors([]));

const agentsSdkAgent =
  (useResponses: boolean): AgentFunction =>
  async (s, env) => {
    const runner = new Runner({
      modelProvider: new OpenAIProvider({ baseURL: env.baseURL, apiKey: env.apiKey, useResponses }),
    });
    const calc = new Agent({
      name: 'calc',
      instructions: 'Use the add tool.',
      model: env.model,
      tools: [
        tool({
          name: 'add',
          description: 'adds two numbers',
          parameters: z.object({ a: z.number(), b: z.number() }),
          execute: async ({ a, b }) => String(a + b),
        }),
      ],
    });
    const r = await runner.run(calc, s.prompt, {
      maxTurns: 3,
      tracing: { apiKey: env.apiKey },
    });
    // The processor exports in batches: send the rest before the episode's key is revoked.
    await getGlobalTraceProvider().forceFlush();
    return r.finalOutput === 'The answer is 5.' ? 1 : 0;
  };

const spanNodes = (nodes: TraceNode[]): Extract<TraceNode, { kind: 'span' }>[] =>
  nodes.flatMap((n) => (n.kind === 'span' ? [n, ...spanNodes(n.children)] : []));

for (const useResponses of [false, true]) {
  const api = useResponses ? 'responses' : 'chat completions';
  test(`the Agents SDK's trace joins its completions (${api})`, async () => {
    const ts = await runGatewayEpisode(sample, {
      file: 'agents-sdk-traced.ts',
      agent: agentsSdkAgent(useResponses),
      gateway: gateway.gw,
      signal: new AbortController().signal,
    });
    assert.is(ts.length, 1);
    assert.is(ts[0]!.reward, 1);
    const trace = ts[0]!.trace!;
    assert.ok(trace, 'the trajectory carries the agent trace');
    assert.is(trace.traceIds.length, 1);
    assert.is(trace.calls.length, 2);
    const model = useResponses ? 'response' : 'generation';
    const names = trace.spans.map((s) => s.name);
    for (const n of ['agent calc', 'function add', model])
      assert.ok(names.includes(n), `${n} in ${names.join(', ')}`);
    // The run's task span at the root, the agent under it, a span per turn under the agent, and
    // each model call under its own model span, joined by the response id the SDK recorded.
    const tree = traceTree(trace);
    assert.is(tree.length, 1);
    const root = tree[0] as Extract<TraceNode, { kind: 'span' }>;
    assert.is(root.span.name, 'task Agent workflow');
    assert.equal(
      root.children.map((n) => n.kind === 'span' && n.span.name),
      ['agent calc'],
    );
    const agentNode = root.children[0] as Extract<TraceNode, { kind: 'span' }>;
    assert.equal(
      agentNode.children.map((n) => n.kind === 'span' && n.span.name),
      ['turn 1', 'turn 2'],
    );
    const modelSpans = spanNodes(tree).filter((n) => n.span.name === model);
    assert.is(modelSpans.length, 2);
    for (const [i, c] of trace.calls.entries()) {
      assert.is(c.joinedBy, 'response_id');
      assert.is(c.spanId, modelSpans[i]!.span.spanId);
      assert.equal(
        modelSpans[i]!.children.map((n) => n.kind),
        ['call'],
      );
    }
    // The SDK's token counts (the task's, each turn's, and the chat model's generation spans)
    // are the gateway's for the calls under them.
    const counted = trace.spans.filter((s) => s.usage?.recorded);
    const expected = ['task Agent workflow', 'turn 1', 'turn 2'];
    if (!useResponses) expected.push('generation', 'generation');
    assert.equal(counted.map((s) => s.name).sort(), expected.sort());
    for (const s of counted) assert.is(usageMismatch(s.usage!), undefined, s.name);
    const all = trace.calls.reduce((n, c) => n + c.promptTokens, 0);
    assert.is(root.span.usage?.input, all);
    const lines = traceLines(trace).join('\n');
    assert.match(
      lines,
      /^task Agent workflow {2}[\d.]+m?s {2}tokens \d+ in \/ \d+ out \(= gateway\)/,
    );
    assert.match(lines, /\n {2,}function add {2}\d/);
    assert.match(lines, /\n {4,}model call (chatcmpl|resp)_?-?\S+ {2}/);
  });
}

test('malformed Agents SDK bodies are 400s, trace records are skipped, errors kept', async () => {
  assert.throws(() => spansFromAgentsSdk({ items: [] }), /the body must be \{ data/);
  assert.throws(
    () => spansFromAgentsSdk({ data: [{ object: 'trace.span', id: 'span_1' }] }),
    /without its id and trace_id/,
  );
  const [s] = spansFromAgentsSdk({
    data: [
      { object: 'trace', id: 'trace_0123456789abcdef0123456789abcdef', workflow_name: 'w' },
      {
        object: 'trace.span',
        id: 'span_0123456789abcdef01234567',
        trace_id: 'trace_0123456789abcdef0123456789abcdef',
        parent_id: 'span_custom',
        started_at: '2026-12-07T12:00:00.000Z',
        ended_at: '2026-12-07T12:00:00.250Z',
        span_data: { type: 'function', name: 'lookup', input: '{}', output: '' },
        error: { message: 'lookup failed' },
      },
    ],
  });
  assert.is(s!.traceId, '0123456789abcdef0123456789abcdef');
  assert.is(s!.spanId.length, 16);
  assert.is(s!.parentSpanId!.length, 16);
  assert.is(s!.endMs - s!.startMs, 250);
  assert.is(s!.name, 'function lookup');
  assert.is(s!.attributes['gen_ai.tool.name'], 'lookup');
  assert.ok(s!.error);
  assert.is(s!.statusMessage, 'lookup failed');
  const s2 = gateway.gw.openSession();
  try {
    const r = await fetch(`${gateway.gw.baseURL}/traces/ingest`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${s2.apiKey}` },
      body: JSON.stringify({ data: [{ object: 'trace.span', id: 'x', trace_id: 'y' }] }),
    });
    assert.is(r.status, 400);
    assert.match(await r.text(), 'Agents SDK traces');
  } finally {
    s2.close();
  }
});

test.run();
