// train_ppo --otlp-endpoint sends the run's phases as OTLP/HTTP JSON spans: a receiver started
// here (a loopback HTTP server, read with the gateway's own OTLP decoder) gets one trace, a span
// per step under the run's, a child per timed phase whose duration is the logged metric, GenAI
// attributes on the model-call phases; a receiver that is away warns once and the run goes on.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { type OtlpSpan, spansFromJson } from '../../gateway/otlp.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { otlpHeaders, otlpTracesUrl } from '../../train/trackers/otlp.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-otlp-'));
let model = '';
const agent = fileURLToPath(new URL('../fixtures/agents/multi-turn-step.ts', import.meta.url));

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

/** An OTLP/HTTP receiver: keeps each request's path, headers and raw JSON body. */
async function startReceiver() {
  const requests: { path: string; type: string; auth: string; body: unknown }[] = [];
  const server = createHttpServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({
        path: req.url ?? '',
        type: req.headers['content-type'] ?? '',
        auth: req.headers.authorization ?? '',
        body: JSON.parse(Buffer.concat(chunks).toString('utf8')),
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return { url, requests, close: () => new Promise((r) => server.close(r)) };
}

/** A run's log that keeps its lines and metric rows. */
function runLog() {
  const lines: string[] = [];
  const rows: { step: number; values: Record<string, number> }[] = [];
  return {
    lines,
    rows,
    log: {
      line: (t: string) => void lines.push(t),
      metric: (step: number, values: Record<string, number>) =>
        void rows.push({ step, values: { ...values } }),
    },
  };
}

const phaseKeys: Record<string, string> = {
  generate: 'generate_s',
  experience: 'experience_s',
  train: 'train_s',
  weight_sync: 'weight_sync_s',
  eval: 'eval_s',
};

test('train_ppo exports one trace: run → step → phases, durations as logged, GenAI attributes', async () => {
  const rx = await startReceiver();
  try {
    const { lines, rows, log } = runLog();
    const s = await trainPpo(
      tinyRunArgs(model, join(root, 'ppo-otlp'), {
        'in-process': true,
        'max-steps': 2,
        'agent-func': agent,
        'wandb-run-name': 'otlp-a',
        'eval-dataset': 'arith:test',
        'eval-prompts': 2,
        'eval-steps': 1,
        'otlp-endpoint': rx.url,
      }),
      // The auth header comes from the environment, percent-encoded as OpenTelemetry writes it.
      { OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20t0k', OTEL_SERVICE_NAME: 'math-rl' },
      { log, trackerFlushIntervalMs: 20 },
    );
    assert.is(s.steps, 2);
    assert.ok(rx.requests.length >= 1);
    for (const r of rx.requests) {
      assert.is(r.path, '/v1/traces');
      assert.match(r.type, /^application\/json/);
      assert.is(r.auth, 'Bearer t0k');
      const rs = (r.body as { resourceSpans: { resource: { attributes: unknown[] } }[] })
        .resourceSpans[0]!;
      assert.ok(
        JSON.stringify(rs.resource.attributes).includes(
          '{"key":"service.name","value":{"stringValue":"math-rl"}}',
        ),
      );
    }
    const raw = JSON.stringify(rx.requests.map((r) => r.body));
    // Times as decimal strings of nanoseconds, integers as int64 strings (OTLP/JSON).
    assert.match(raw, /"startTimeUnixNano":"\d{19}"/);
    assert.match(raw, /"key":"gen_ai.usage.output_tokens","value":\{"intValue":"\d+"\}/);
    const spans: OtlpSpan[] = rx.requests.flatMap((r) => spansFromJson(r.body));
    assert.is(new Set(spans.map((x) => x.traceId)).size, 1, 'one trace per run');
    const roots = spans.filter((x) => !x.parentSpanId);
    assert.is(roots.length, 1);
    const run = roots[0]!;
    assert.is(run.name, 'train_ppo otlp-a');
    assert.is(run.error, false);
    const steps = spans.filter((x) => x.parentSpanId === run.spanId);
    const stepRows = rows.filter((r) => r.values.step_s !== undefined);
    assert.equal(
      steps.map((x) => x.name),
      stepRows.map((r) => `step ${r.step}`),
    );
    for (const st of steps) {
      assert.ok(
        st.startMs >= run.startMs - 1 && st.endMs <= run.endMs + 1,
        'a step lies in the run',
      );
      const v = stepRows.find((r) => `step ${r.step}` === st.name)!.values;
      assert.is(st.attributes['rtjob.step'], Number(st.name.slice(5)));
      const stepMs = (v.step_s! + (v.eval_s ?? 0)) * 1000;
      assert.ok(
        Math.abs(st.endMs - st.startMs - stepMs) < 0.01,
        `${st.name} lasts step_s + eval_s`,
      );
      const children = spans.filter((x) => x.parentSpanId === st.spanId);
      // Every timed phase of the row, in the loop's order, each lasting its logged time.
      const expected = Object.keys(phaseKeys).filter((p) => v[phaseKeys[p]!] !== undefined);
      assert.ok(expected.includes('train'), JSON.stringify(v));
      assert.equal(
        children.map((c) => c.name),
        expected,
      );
      for (const c of children) {
        const ms = v[phaseKeys[c.name]!]! * 1000;
        assert.ok(Math.abs(c.endMs - c.startMs - ms) < 0.01, `${st.name} ${c.name} lasts ${ms} ms`);
        // Sync: the phases lie back to back inside the step and end with it.
        assert.ok(c.startMs >= st.startMs - 0.01 && c.endMs <= st.endMs + 0.01, c.name);
        assert.is(c.attributes['rtjob.phase'], c.name);
      }
      assert.ok(Math.abs(children.at(-1)!.endMs - st.endMs) < 0.01);
      for (let i = 1; i < children.length; i++)
        assert.ok(Math.abs(children[i]!.startMs - children[i - 1]!.endMs) < 0.01);
      const gen = children.find((c) => c.name === 'generate')!;
      assert.is(gen.attributes['gen_ai.operation.name'], 'text_completion');
      assert.is(gen.attributes['gen_ai.request.model'], model);
      assert.is(gen.attributes['gen_ai.provider.name'], 'builtin');
      assert.is(gen.attributes['gen_ai.usage.output_tokens'], v.tokens);
      const ev = children.find((c) => c.name === 'eval');
      // Step 1 is evaluated within the step (--eval-steps 1); the last one after the run.
      assert.is(ev !== undefined, st.name === 'step 1', st.name);
      if (ev) assert.is(ev.attributes['gen_ai.operation.name'], 'text_completion');
      assert.is(
        children.find((c) => c.name === 'train')!.attributes['gen_ai.operation.name'],
        undefined,
      );
    }
    assert.ok(lines.some((l) => l.startsWith(`otlp: ${rx.url}/v1/traces (trace ${run.traceId})`)));
    assert.not.ok(
      lines.some((l) => /not delivered|cannot reach/.test(l)),
      lines.join('\n'),
    );
  } finally {
    await rx.close();
  }
});

test('--async-train: each step and its evaluation beside training are under the step, durations as logged', async () => {
  const rx = await startReceiver();
  try {
    const { rows, log } = runLog();
    const s = await trainPpo(
      tinyRunArgs(model, join(root, 'ppo-otlp-async'), {
        'in-process': true,
        'max-steps': 3,
        'async-train': true,
        'async-queue-size': 1,
        'agent-func': agent,
        'eval-dataset': 'arith:test',
        'eval-prompts': 2,
        'eval-steps': 1,
        'otlp-endpoint': rx.url,
      }),
      {},
      { log, trackerFlushIntervalMs: 20 },
    );
    assert.is(s.steps, 3);
    const spans = rx.requests.flatMap((r) => spansFromJson(r.body));
    const run = spans.find((x) => !x.parentSpanId)!;
    const steps = spans.filter((x) => x.parentSpanId === run.spanId);
    assert.equal(
      steps.map((x) => x.name),
      ['step 1', 'step 2', 'step 3'],
    );
    const beside = rows.filter((r) => r.values.eval_s !== undefined);
    assert.ok(beside.length >= 1, 'an evaluation ran beside training');
    for (const st of steps) {
      const step = Number(st.name.slice(5));
      const children = spans.filter((x) => x.parentSpanId === st.spanId);
      // Every timed value of every row of this step, as a span under the step's.
      const logged = rows
        .filter((r) => r.step === step)
        .flatMap((r) =>
          Object.entries(phaseKeys)
            .filter(([, k]) => r.values[k] !== undefined)
            .map(([name, k]) => ({ name, ms: r.values[k]! * 1000 })),
        );
      assert.equal(
        children.map((c) => c.name),
        logged.map((l) => l.name),
        st.name,
      );
      children.forEach((c, i) =>
        assert.ok(Math.abs(c.endMs - c.startMs - logged[i]!.ms) < 0.01, `${st.name} ${c.name}`),
      );
    }
  } finally {
    await rx.close();
  }
});

test('an OTLP receiver that cannot be reached warns once and the run keeps all its metrics', async () => {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  const { lines, rows, log } = runLog();
  const out = await trainPpo(
    tinyRunArgs(model, join(root, 'ppo-otlp-down'), {
      'in-process': true,
      'max-steps': 2,
      'agent-func': agent,
      'otlp-endpoint': true,
    }),
    { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` },
    { log, trackerFlushIntervalMs: 20 },
  );
  assert.is(out.steps, 2);
  assert.equal(
    rows.filter((r) => 'reward_mean' in r.values).map((r) => r.step),
    [1, 2],
  );
  const warned = lines.filter((l) => l.startsWith('otlp: cannot reach'));
  assert.is(warned.length, 1, lines.join('\n'));
  assert.match(
    warned[0]!,
    /ECONNREFUSED\); the run goes on \(rtjob's own metrics keep every row\)/,
  );
  assert.ok(
    lines.some((l) => /^otlp: \d+ step row\(s\) not delivered/.test(l)),
    lines.join('\n'),
  );
});

test('the endpoint and headers are read as OpenTelemetry exporters read them', () => {
  assert.is(otlpTracesUrl('http://c:4318', {}), 'http://c:4318/v1/traces');
  assert.is(otlpTracesUrl('http://c:4318/', {}), 'http://c:4318/v1/traces');
  assert.is(otlpTracesUrl('http://c:4318/v1/traces', {}), 'http://c:4318/v1/traces');
  assert.is(
    otlpTracesUrl('true', { OTEL_EXPORTER_OTLP_ENDPOINT: 'https://o/x' }),
    'https://o/x/v1/traces',
  );
  // The per-signal variable is the traces URL as it is.
  assert.is(
    otlpTracesUrl('true', {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'https://o',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://t/traces',
    }),
    'https://t/traces',
  );
  assert.throws(() => otlpTracesUrl('true', {}), /--otlp-endpoint: give the receiver/);
  assert.throws(() => otlpTracesUrl('localhost:4317', {}), /not an http\(s\) URL/);
  assert.equal(otlpHeaders({ OTEL_EXPORTER_OTLP_HEADERS: 'api-key=a%3Db, X-Team = ml ,bad' }), {
    'api-key': 'a=b',
    'x-team': 'ml',
  });
  assert.equal(
    otlpHeaders({ OTEL_EXPORTER_OTLP_HEADERS: 'a=1', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'b=2' }),
    { b: '2' },
  );
});

test.run();
