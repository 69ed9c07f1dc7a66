// The gateway takes an agent's OpenTelemetry spans at its base URL (`POST /v1/traces`, OTLP/HTTP
// JSON and protobuf, the episode's key) and each trajectory of the episode carries the agent's
// span tree joined to the completions: through the AI SDK's own telemetry exported by the
// OpenTelemetry SDK's real OTLP exporters, by a `traceparent` a call carried, and bounded.
import { createOpenAI } from '@ai-sdk/openai';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { generateText, stepCountIs, tool as aiTool } from 'ai';
import OpenAI from 'openai';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { z } from 'zod';
import { runGatewayEpisode } from '../../agents/agent-executor.ts';
import type { AgentFunction } from '../../agents/types.ts';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import { EpisodeTrace, traceLimits } from '../../gateway/episode-trace.ts';
import { spansFromProtobuf } from '../../gateway/otlp.ts';
import {
  shownTokens,
  traceLines,
  traceTree,
  usageMismatch,
  type TraceNode,
} from '../../runtime/agent-trace.ts';
import {
  addSample,
  addToolModel,
  compactToolTemplate,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// As a Node agent's OpenTelemetry setup does (NodeSDK, NodeTracerProvider.register()): spans
// started inside an active span are its children.
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const tok = tokenizerWith(compactToolTemplate);
const { engine } = addToolModel(tok);
const gateway = suiteGateway(test, { engine, tokenizer: tok });
const sample = addSample();

const episode = (agent: AgentFunction): Promise<Trajectory[]> =>
  runGatewayEpisode(sample, {
    file: 'traced-agent.ts',
    agent,
    gateway: gateway.gw,
    signal: new AbortController().signal,
  });

/** An AI SDK agent with telemetry on, exported to the gateway by the OTLP exporter given. */
const aiSdkAgent =
  (exporter: 'json' | 'protobuf'): AgentFunction =>
  async (s, env) => {
    const options = {
      url: `${env.baseURL}/traces`,
      headers: { Authorization: `Bearer ${env.apiKey}` },
    };
    const provider = new TracerProvider({
      spanProcessors: [
        new SimpleSpanProcessor({
          exporter: exporter === 'json' ? new JsonExporter(options) : new ProtoExporter(options),
        }),
      ],
    });
    const openai = createOpenAI({ baseURL: env.baseURL, apiKey: env.apiKey });
    const r = await generateText({
      model: openai.chat(env.model),
      prompt: s.prompt,
      tools: {
        add: aiTool({
          description: 'adds',
          inputSchema: z.object({ a: z.number(), b: z.number() }),
          execute: async ({ a, b }) => a + b,
        }),
      },
      stopWhen: stepCountIs(4),
      maxRetries: 0,
      experimental_telemetry: { isEnabled: true, tracer: provider.getTracer('agent') },
    });
    // Spans are exported as they end; the episode's key is revoked when the agent returns.
    await provider.forceFlush();
    await provider.shutdown();
    return r.text === 'The answer is 5.' ? 1 : 0;
  };

/** Runs of generated tokens (the completions) of a trajectory, in order. */
function generatedRuns(t: Trajectory): { n: number; logprobs: number[]; versions: number[] }[] {
  const out: { n: number; logprobs: number[]; versions: number[] }[] = [];
  for (let i = 0; i < t.lossMask.length; i++) {
    if (t.lossMask[i] !== 1) continue;
    if (i === 0 || t.lossMask[i - 1] !== 1) out.push({ n: 0, logprobs: [], versions: [] });
    const run = out.at(-1)!;
    run.n++;
    run.logprobs.push(t.logprobs[i]!);
    run.versions.push(t.versions[i]!);
  }
  return out;
}

/** The span nodes of a tree, depth first. */
function spanNodes(nodes: TraceNode[]): Extract<TraceNode, { kind: 'span' }>[] {
  return nodes.flatMap((n) => (n.kind === 'span' ? [n, ...spanNodes(n.children)] : []));
}

for (const exporter of ['json', 'protobuf'] as const) {
  test(`the AI SDK's spans, exported by the OTLP ${exporter} exporter, join their completions`, async () => {
    const ts = await episode(aiSdkAgent(exporter));
    assert.is(ts.length, 1);
    const t = ts[0]!;
    assert.is(t.reward, 1);
    const trace = t.trace;
    assert.ok(trace, 'the trajectory carries the agent trace');
    const names = trace.spans.map((s) => s.name);
    for (const n of ['ai.generateText', 'ai.generateText.doGenerate', 'ai.toolCall'])
      assert.ok(names.includes(n), `${n} in ${names.join(', ')}`);
    assert.is(trace.traceIds.length, 1);
    assert.is(trace.droppedSpans, 0);
    // Two model calls (the tool call, then the answer), each under its own doGenerate span.
    assert.is(trace.calls.length, 2);
    const steps = trace.spans.filter((s) => s.name === 'ai.generateText.doGenerate');
    assert.is(steps.length, 2);
    const runs = generatedRuns(t);
    assert.is(runs.length, 2);
    for (const [i, c] of trace.calls.entries()) {
      assert.is(c.joinedBy, 'response_id');
      assert.is(c.spanId, steps[i]!.spanId, `call ${i} under step ${i}`);
      assert.is(steps[i]!.attributes?.['ai.response.id'], c.responseId);
      // The completion's tokens, logprobs and versions are the trajectory's own.
      const k = c.completions[0]!;
      assert.is(k.tokens, runs[i]!.n);
      assert.equal(
        k.shown.map((x) => x.logprob),
        runs[i]!.logprobs.slice(0, k.shown.length),
      );
      assert.is(k.versionMin, Math.min(...runs[i]!.versions));
      assert.is(k.versionMax, Math.max(...runs[i]!.versions));
    }
    assert.match(trace.calls[0]!.completions[0]!.shown.map((x) => x.text).join(''), '"add"');
    // Drawn as a tree: the run, its steps under it, each call under its step.
    const tree = traceTree(trace);
    assert.is(tree.length, 1);
    const root = tree[0]! as Extract<TraceNode, { kind: 'span' }>;
    assert.is(root.span.name, 'ai.generateText');
    const nested = spanNodes(tree).filter((n) => n.span.name === 'ai.generateText.doGenerate');
    for (const n of nested)
      assert.equal(
        n.children.map((c) => c.kind),
        ['call'],
      );
    // The AI SDK's token counts (gen_ai.usage.* on a step, ai.usage.* on the run) are the
    // gateway's: per step for its call, and summed over both on the run.
    for (const [i, step] of steps.entries()) {
      const c = trace.calls[i]!;
      assert.equal(step.usage, {
        input: c.promptTokens,
        output: c.completions[0]!.tokens,
        recorded: { input: c.promptTokens, output: c.completions[0]!.tokens, calls: 1 },
      });
      assert.is(usageMismatch(step.usage!), undefined);
    }
    assert.equal(root.span.usage?.recorded, {
      input: trace.calls[0]!.promptTokens + trace.calls[1]!.promptTokens,
      output: runs[0]!.n + runs[1]!.n,
      calls: 2,
    });
    assert.is(root.span.usage?.input, root.span.usage?.recorded?.input);
    assert.is(root.span.usage?.output, root.span.usage?.recorded?.output);
    const lines = traceLines(trace);
    assert.ok(lines[0]!.startsWith('ai.generateText '));
    assert.match(lines[0]!, / tokens \d+ in \/ \d+ out \(= gateway\)$/);
    assert.ok(lines.some((l) => /^ {4}model call chatcmpl-/.test(l)));
  });
}

test('a call joins the span its traceparent names; errors and other clients’ keys', async () => {
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const parent = '00f067aa0ba902b7';
  const ns = (ms: number) => String(BigInt(Date.now() + ms) * 1_000_000n);
  const ts = await episode(async (_s, env) => {
    const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey, maxRetries: 0 });
    await client.chat.completions.create(
      { model: env.model, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { traceparent: `00-${traceId}-${parent}-01` } },
    );
    const span = (spanId: string, name: string, extra: object = {}) => ({
      traceId,
      spanId,
      name,
      startTimeUnixNano: ns(-50),
      endTimeUnixNano: ns(0),
      ...extra,
    });
    const body = {
      resourceSpans: [
        {
          scopeSpans: [
            {
              spans: [
                span('aaaaaaaaaaaaaaaa', 'agent.run'),
                span(parent, 'agent.llm', { parentSpanId: 'aaaaaaaaaaaaaaaa' }),
                span('bbbbbbbbbbbbbbbb', 'tool.lookup', {
                  parentSpanId: 'aaaaaaaaaaaaaaaa',
                  status: { code: 2, message: 'lookup failed: no such city' },
                }),
              ],
            },
          ],
        },
      ],
    };
    const r = await fetch(`${env.baseURL}/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${env.apiKey}` },
      body: JSON.stringify(body),
    });
    assert.is(r.status, 200);
    assert.equal(await r.json(), {});
    // Without the episode's key nothing is taken.
    const denied = await fetch(`${env.baseURL}/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    assert.is(denied.status, 401);
    return 1;
  });
  const trace = ts[0]!.trace!;
  assert.is(trace.spans.length, 3);
  assert.is(trace.calls[0]!.spanId, parent);
  assert.is(trace.calls[0]!.joinedBy, 'traceparent');
  assert.is(
    trace.spans.find((s) => s.name === 'tool.lookup')!.error,
    'lookup failed: no such city',
  );
  assert.match(traceLines(trace).join('\n'), /tool\.lookup .*ERROR lookup failed: no such city/);
});

test('a span whose token counts differ from the gateway’s shows the mismatch', async () => {
  const traceId = '5bf92f3577b34da6a3ce929d0e0e4736';
  const ns = (ms: number) => String(BigInt(Date.now() + ms) * 1_000_000n);
  let usage: { prompt_tokens: number; completion_tokens: number } | undefined;
  const ts = await episode(async (_s, env) => {
    const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey, maxRetries: 0 });
    const r = await client.chat.completions.create(
      { model: env.model, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { traceparent: `00-${traceId}-00000000000000c1-01` } },
    );
    usage = r.usage!;
    const kv = (key: string, n: number) => ({ key, value: { intValue: String(n) } });
    const span = (spanId: string, name: string, attributes: object[], parent?: string) => ({
      traceId,
      spanId,
      ...(parent ? { parentSpanId: parent } : {}),
      name,
      startTimeUnixNano: ns(-50),
      endTimeUnixNano: ns(0),
      attributes,
    });
    const spans = [
      // The run reports the gateway's counts in the current names.
      span('00000000000000a1', 'agent.run', [
        kv('gen_ai.usage.input_tokens', usage.prompt_tokens),
        kv('gen_ai.usage.output_tokens', usage.completion_tokens),
      ]),
      // Its model call, in the older names, counts one output token more than was generated.
      span(
        '00000000000000c1',
        'agent.llm',
        [
          kv('gen_ai.usage.prompt_tokens', usage.prompt_tokens),
          kv('gen_ai.usage.completion_tokens', usage.completion_tokens + 1),
        ],
        '00000000000000a1',
      ),
      // A span with counts and no call under it: shown, not checked.
      span('00000000000000b1', 'agent.plan', [kv('gen_ai.usage.input_tokens', 7)]),
    ];
    const res = await fetch(`${env.baseURL}/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${env.apiKey}` },
      body: JSON.stringify({ resourceSpans: [{ scopeSpans: [{ spans }] }] }),
    });
    assert.is(res.status, 200);
    return 1;
  });
  const trace = ts[0]!.trace!;
  const by = (name: string) => trace.spans.find((s) => s.name === name)!.usage!;
  const recorded = { input: usage!.prompt_tokens, output: usage!.completion_tokens, calls: 1 };
  assert.equal(by('agent.run'), {
    input: usage!.prompt_tokens,
    output: usage!.completion_tokens,
    recorded,
  });
  assert.is(usageMismatch(by('agent.run')), undefined);
  assert.equal(by('agent.llm').recorded, recorded);
  assert.is(
    usageMismatch(by('agent.llm')),
    `span ${usage!.prompt_tokens} in / ${usage!.completion_tokens + 1} out, gateway ${usage!.prompt_tokens} in / ${usage!.completion_tokens} out over 1 call`,
  );
  assert.equal(by('agent.plan'), { input: 7 });
  const text = traceLines(trace).join('\n');
  assert.match(text, /\n {2}agent\.llm .* tokens MISMATCH span \d+ in \/ \d+ out, gateway/);
  assert.match(text, /agent\.plan .* tokens 7 in \/ \? out(\n|$)/);
});

test('a run’s span counts the calls of its steps cut from the sample', async () => {
  const traceId = '6bf92f3577b34da6a3ce929d0e0e4736';
  const t0 = Date.now();
  const ns = (ms: number) => String(BigInt(t0 + ms) * 1_000_000n);
  const ts = await episode(async (_s, env) => {
    const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey, maxRetries: 0 });
    const r = await client.chat.completions.create(
      { model: env.model, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { traceparent: `00-${traceId}-00000000000000c2-01` } },
    );
    const kv = (key: string, n: number) => ({ key, value: { intValue: String(n) } });
    const span = (spanId: string, name: string, start: number, extra: object = {}) => ({
      traceId,
      spanId,
      name,
      startTimeUnixNano: ns(start),
      endTimeUnixNano: ns(start + 1),
      ...extra,
    });
    // The run first, then more steps than a sample keeps, the model call's step last.
    const spans = [
      span('00000000000000a2', 'run', 0, {
        endTimeUnixNano: ns(1000),
        attributes: [
          kv('gen_ai.usage.input_tokens', r.usage!.prompt_tokens),
          kv('gen_ai.usage.output_tokens', r.usage!.completion_tokens),
        ],
      }),
      ...Array.from({ length: traceLimits.sampleSpans }, (_, i) =>
        span((0x100 + i).toString(16).padStart(16, '0'), `step ${i}`, 1 + i, {
          parentSpanId: '00000000000000a2',
        }),
      ),
      span('00000000000000c2', 'llm', 900, { parentSpanId: '00000000000000a2' }),
    ];
    await fetch(`${env.baseURL}/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${env.apiKey}` },
      body: JSON.stringify({ resourceSpans: [{ scopeSpans: [{ spans }] }] }),
    });
    return 1;
  });
  const trace = ts[0]!.trace!;
  assert.is(trace.spans.length, traceLimits.sampleSpans);
  assert.ok(!trace.spans.some((s) => s.name === 'llm'), 'the call’s step is cut');
  assert.is(trace.calls[0]!.spanId, undefined);
  const run = trace.spans.find((s) => s.name === 'run')!;
  assert.is(run.usage?.recorded?.calls, 1);
  assert.is(usageMismatch(run.usage!), undefined);
});

test('an episode without a trace carries none', async () => {
  const ts = await episode(async (_s, env) => {
    const client = new OpenAI({ baseURL: env.baseURL, apiKey: env.apiKey, maxRetries: 0 });
    await client.chat.completions.create({
      model: env.model,
      messages: [{ role: 'user', content: 'hi' }],
    });
    return 1;
  });
  assert.is(ts[0]!.trace, undefined);
});

test('bounded: spans past the limit are refused in partialSuccess; big, malformed and untyped bodies are errors', async () => {
  const s = gateway.gw.openSession();
  const url = `${gateway.gw.baseURL}/traces`;
  const auth = { authorization: `Bearer ${s.apiKey}` };
  const spans = (n: number, from: number) =>
    Array.from({ length: n }, (_, i) => ({
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: (from + i + 1).toString(16).padStart(16, '0'),
      name: `s${from + i}`,
      startTimeUnixNano: '1',
      endTimeUnixNano: '2',
    }));
  const post = (body: unknown, type = 'application/json') =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': type, ...auth },
      body:
        typeof body === 'string'
          ? body
          : body instanceof Uint8Array
            ? new Uint8Array(body)
            : JSON.stringify(body),
    });
  const wrap = (list: unknown[]) => ({ resourceSpans: [{ scopeSpans: [{ spans: list }] }] });
  try {
    const max = traceLimits.maxSpans;
    let r = await post(wrap(spans(max - 10, 0)));
    assert.equal(await r.json(), {});
    r = await post(wrap(spans(25, max)));
    assert.is(r.status, 200);
    const answer = (await r.json()) as { partialSuccess: { rejectedSpans: number } };
    assert.is(answer.partialSuccess.rejectedSpans, 15);
    assert.match(JSON.stringify(answer), `at most ${max} spans`);
    assert.is(s.trace.spanCount, max);
    // Nothing at all for the model calls made: the trace builds, capped for the sample.
    const built = s.agentTrace()!;
    assert.is(built.spans.length, traceLimits.sampleSpans);
    assert.is(built.droppedSpans, max + 15 - traceLimits.sampleSpans);

    r = await post('x'.repeat(traceLimits.maxBodyBytes + 1));
    assert.is(r.status, 413);
    r = await post('{"resourceSpans": 3}');
    assert.is(r.status, 400);
    assert.match(await r.text(), 'resourceSpans must be an array');
    r = await post(wrap([{ traceId: 'zz', spanId: '01', name: 'x' }]));
    assert.is(r.status, 400);
    r = await post('{}', 'text/plain');
    assert.is(r.status, 415);
    r = await post(new Uint8Array([0x0a, 0x05, 0x12]), 'application/x-protobuf');
    assert.is(r.status, 400);
    assert.match(await r.text(), 'truncated protobuf');
  } finally {
    s.close();
  }
});

test('a kept trace fits its byte budget: token text, then the latest spans, then calls go', () => {
  const build = (spans: number, calls: number) => {
    const t = new EpisodeTrace();
    t.addSpans(
      Array.from({ length: spans }, (_, i) => ({
        traceId: '0af7651916cd43dd8448eb211c80319c',
        spanId: (i + 1).toString(16).padStart(16, '0'),
        name: `step ${i}`,
        startMs: 1000 + i,
        endMs: 1001 + i,
        error: false,
        statusMessage: '',
        attributes: {
          'gen_ai.request.model': 'm'.repeat(500),
          'gen_ai.tool.name': 't'.repeat(500),
        },
        events: [],
      })),
    );
    for (let i = 0; i < calls; i++) {
      t.addCall({
        responseId: `chatcmpl-${i}`,
        startMs: 1000 + i,
        endMs: 1001 + i,
        promptTokens: 10,
        completions: [{ ids: Array(40).fill(7), logprobs: Array(40).fill(-0.5), versions: [0] }],
      });
    }
    const trace = t.build(() => 'tok')!;
    assert.ok(
      Buffer.byteLength(JSON.stringify(trace)) <= traceLimits.sampleBytes + 512,
      `${Buffer.byteLength(JSON.stringify(trace))} bytes`,
    );
    return trace;
  };
  // Few calls, many big spans: the earliest spans stay, all calls with their text.
  let trace = build(120, 2);
  assert.ok(trace.spans.length < 120 && trace.spans.length > 10);
  assert.equal(
    trace.spans.map((s) => s.name),
    Array.from({ length: trace.spans.length }, (_, i) => `step ${i}`),
  );
  assert.is(trace.droppedSpans, 120 - trace.spans.length);
  assert.ok(trace.calls.every((c) => c.completions[0]!.shown.length === shownTokens));
  assert.is(trace.droppedCalls, undefined);
  // More calls: the latest lose their token text first, the earliest keep it.
  trace = build(10, 24);
  const shown = trace.calls.map((c) => c.completions[0]!.shown.length);
  assert.is(shown[0], shownTokens);
  assert.is(shown.at(-1), 0);
  assert.equal(
    shown,
    [...shown].sort((a, b) => b - a),
  );
  assert.is(trace.calls.length, 24);
  assert.is(trace.droppedCalls, undefined);
  // Too many for their counts alone: the latest calls go, counted.
  trace = build(10, 400);
  assert.ok(trace.calls.every((c) => c.completions[0]!.shown.length === 0));
  assert.ok(trace.droppedCalls! > 0);
  assert.is(trace.calls.length + trace.droppedCalls!, 400);
  assert.is(trace.calls.at(-1)!.responseId, `chatcmpl-${trace.calls.length - 1}`);
  assert.match(traceLines(trace).at(-1)!, `(${trace.droppedCalls} later model calls not kept)`);
});

test('protobuf: 64-bit times, typed attribute values and the error status decode', () => {
  // A Span built by hand from trace.proto's field numbers.
  const bytes = (...xs: (number | number[] | Uint8Array)[]): Uint8Array =>
    Uint8Array.from(xs.flatMap((x) => (typeof x === 'number' ? [x] : [...x])));
  const varint = (n: number): number[] =>
    n < 0x80 ? [n] : [(n & 0x7f) | 0x80, ...varint(n >>> 7)];
  const len = (field: number, body: Uint8Array) =>
    bytes((field << 3) | 2, varint(body.length), body);
  const str = (field: number, s: string) => len(field, new TextEncoder().encode(s));
  const fixed64 = (field: number, v: bigint) => {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, v, true);
    return bytes((field << 3) | 1, b);
  };
  const kv = (key: string, value: Uint8Array) => len(9, bytes(str(1, key), len(2, value)));
  const traceId = new Uint8Array(16).fill(0xab);
  const spanId = new Uint8Array(8).fill(0xcd);
  const dbl = new Uint8Array(8);
  new DataView(dbl.buffer).setFloat64(0, 0.5, true);
  const span = bytes(
    len(1, traceId),
    len(2, spanId),
    str(5, 'step'),
    fixed64(7, 1_700_000_000_123_456_789n),
    fixed64(8, 1_700_000_000_223_456_789n),
    kv('gen_ai.request.model', str(1, 'tiny')),
    kv('gen_ai.usage.input_tokens', bytes(3 << 3, 42)),
    kv('ok', bytes(2 << 3, 1)),
    kv('p', bytes((4 << 3) | 1, dbl)),
    len(15, bytes(str(2, 'boom'), 3 << 3, 2)),
  );
  const req = len(1, len(2, len(2, span)));
  const [s] = spansFromProtobuf(req);
  assert.is(s!.traceId, 'ab'.repeat(16));
  assert.is(s!.spanId, 'cd'.repeat(8));
  assert.is(s!.name, 'step');
  assert.is(s!.endMs - s!.startMs, 100);
  assert.equal(s!.attributes, {
    'gen_ai.request.model': 'tiny',
    'gen_ai.usage.input_tokens': 42,
    ok: true,
    p: 0.5,
  });
  assert.is(s!.error, true);
  assert.is(s!.statusMessage, 'boom');
});

test.run();
