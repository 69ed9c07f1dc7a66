// A Mastra agent's own trace reaches the episode through Mastra's real exporter: `@mastra/core`'s
// Agent in a `Mastra` whose `Observability` (`@mastra/observability`) sends through
// `@mastra/otel-exporter`'s OTLP/HTTP exporter to the gateway's base URL with the episode's key
// (test/fixtures/agents/mastra-agent.ts). Mastra's model-call spans name no response id and its
// calls carry no `traceparent`, so each call joins the one model-call span whose interval holds
// it; its token counts are checked against the gateway's.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runGatewayEpisode } from '../../agents/agent-executor.ts';
import { EpisodeTrace } from '../../gateway/episode-trace.ts';
import type { OtlpSpan } from '../../gateway/otlp.ts';
import { traceLines, traceTree, usageMismatch, type TraceNode } from '../../runtime/agent-trace.ts';
import { mastraAgent } from '../fixtures/agents/mastra-agent.ts';
import {
  addSample,
  addToolModel,
  compactToolTemplate,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

const tok = tokenizerWith(compactToolTemplate);
const gateway = suiteGateway(test, {
  engine: addToolModel(tok, { answer: (result) => `The answer is ${JSON.parse(result).sum}.` })
    .engine,
  tokenizer: tok,
});
const sample = addSample();

const spanNodes = (nodes: TraceNode[]): Extract<TraceNode, { kind: 'span' }>[] =>
  nodes.flatMap((n) => (n.kind === 'span' ? [n, ...spanNodes(n.children)] : []));

for (const protocol of ['http/json', 'http/protobuf'] as const) {
  test(`a Mastra agent's spans, sent by Mastra's OTLP exporter (${protocol}), join their completions`, async () => {
    const ts = await runGatewayEpisode(sample, {
      file: 'mastra-agent.ts',
      agent: mastraAgent(protocol),
      gateway: gateway.gw,
      signal: new AbortController().signal,
    });
    assert.is(ts.length, 1);
    const t = ts[0]!;
    assert.is(t.reward, 1);
    const trace = t.trace;
    assert.ok(trace, 'the trajectory carries the agent trace');
    const expected = ['invoke_agent calc', 'model_generation tiny', 'agent_step calc', 'chat tiny'];
    for (const n of [...expected, 'execute_tool add'])
      assert.ok(
        trace.spans.some((s) => s.name === n),
        `${n} in ${trace.spans.map((s) => s.name).join(', ')}`,
      );
    assert.is(trace.traceIds.length, 1);
    assert.is(trace.droppedSpans, 0);
    // Two model calls (the tool call, then the answer), each under its own `chat` span.
    const chats = trace.spans.filter((s) => s.name === 'chat tiny');
    assert.is(chats.length, 2);
    assert.is(trace.calls.length, 2);
    for (const [i, c] of trace.calls.entries()) {
      assert.is(c.joinedBy, 'time');
      assert.is(c.spanId, chats[i]!.spanId, `call ${i} under chat span ${i}`);
      // Mastra's own counts (gen_ai.usage.*) are the gateway's for the call under the span.
      assert.equal(chats[i]!.usage, {
        input: c.promptTokens,
        output: c.completions[0]!.tokens,
        recorded: { input: c.promptTokens, output: c.completions[0]!.tokens, calls: 1 },
      });
      assert.is(usageMismatch(chats[i]!.usage!), undefined);
    }
    assert.match(trace.calls[0]!.completions[0]!.shown.map((x) => x.text).join(''), '"add"');
    // The trajectory's generated tokens are the two calls' completions.
    assert.is(
      t.lossMask.filter((m) => m === 1).length,
      trace.calls.reduce((n, c) => n + c.completions[0]!.tokens, 0),
    );
    // Drawn as a tree: the agent run, its generation, a step per call, the tool in the first.
    const tree = traceTree(trace);
    assert.is(tree.length, 1);
    const root = tree[0]! as Extract<TraceNode, { kind: 'span' }>;
    assert.is(root.span.name, 'invoke_agent calc');
    const nodes = spanNodes(tree);
    const steps = nodes.filter((n) => n.span.name === 'agent_step calc');
    assert.is(steps.length, 2);
    const childNames = (n: Extract<TraceNode, { kind: 'span' }>) =>
      n.children.flatMap((c) => (c.kind === 'span' ? [c.span.name] : []));
    assert.ok(childNames(steps[0]!).includes('execute_tool add'));
    for (const n of nodes.filter((x) => x.span.name === 'chat tiny'))
      assert.equal(n.children.filter((c) => c.kind === 'call').length, 1);
    const lines = traceLines(trace);
    assert.ok(lines[0]!.startsWith('invoke_agent calc '));
    assert.ok(
      lines.some((l) => /^ {6}chat tiny .* tokens \d+ in \/ \d+ out \(= gateway\)$/.test(l)),
    );
    assert.ok(lines.some((l) => /^ {8}model call chatcmpl-/.test(l)));
  });
}

test('the time join: one model-call span holding the call, naming no response id', () => {
  const span = (spanId: string, startMs: number, endMs: number, attributes = {}): OtlpSpan => ({
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId,
    name: spanId,
    startMs,
    endMs,
    error: false,
    statusMessage: '',
    attributes: { 'gen_ai.operation.name': 'chat', ...attributes },
    events: [],
  });
  const call = (responseId: string, startMs: number, endMs: number) => ({
    responseId,
    startMs,
    endMs,
    promptTokens: 3,
    completions: [{ ids: [1, 2], logprobs: [-1, -1], versions: [0, 0] }],
  });
  const t = new EpisodeTrace();
  t.addSpans([
    span('run', 1000, 1100, { 'gen_ai.operation.name': 'invoke_agent' }),
    span('a', 1000, 1040),
    span('b', 1050, 1100),
    // Overlaps b: a call in 1060..1070 is held by two model-call spans.
    span('c', 1055, 1075),
    // Names a response: only that response joins it, never by time.
    span('d', 1200, 1300, { 'gen_ai.response.id': 'chatcmpl-other' }),
  ]);
  t.addCall(call('chatcmpl-1', 1010.4, 1040.6)); // within a, up to the clock slack
  t.addCall(call('chatcmpl-2', 1060, 1070)); // b and c: ambiguous
  t.addCall(call('chatcmpl-3', 1210, 1220)); // only inside d, which names another response
  t.addCall(call('chatcmpl-4', 1080, 1099)); // b alone
  t.addCall(call('chatcmpl-5', 1030, 1045)); // sticks out of a
  const trace = t.build(() => 'x')!;
  assert.equal(
    trace.calls.map((c) => [c.responseId, c.spanId, c.joinedBy]),
    [
      ['chatcmpl-1', 'a', 'time'],
      ['chatcmpl-2', undefined, undefined],
      ['chatcmpl-3', undefined, undefined],
      ['chatcmpl-4', 'b', 'time'],
      ['chatcmpl-5', undefined, undefined],
    ],
  );
});

test.run();
