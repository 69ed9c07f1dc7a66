/**
 * `--otlp-endpoint URL`: rtjob's own phases as OpenTelemetry spans, sent to any OTLP/HTTP
 * receiver (a collector, Jaeger, Tempo, Phoenix, Langfuse, …) in OTLP's JSON encoding
 * (`POST <URL>/v1/traces`, `ExportTraceServiceRequest`: `resourceSpans` → `scopeSpans` →
 * `spans`, hex ids, times as decimal strings of Unix nanoseconds).
 *
 * One trace per run: a `train_ppo <run name>` root span, one `step N` span per step, and under it
 * a span per phase the step's metric row times (`generate_s`, `experience_s`, `train_s`,
 * `weight_sync_s`, `eval_s`). Like the other trackers it sees only the rows the driver logs, so
 * the spans are laid out from them: a step span ends when its row was logged and lasts `step_s`
 * (plus `eval_s` when the evaluation ran in the step); its phases lie back to back in the loop's
 * order and end with it. Durations are the logged ones exactly; with `--async-train` generation
 * overlaps the previous steps, and the layout shows that as phases starting before their step.
 * The model-call phases (generation, evaluation) carry the GenAI semantic conventions'
 * attributes: `gen_ai.operation.name` (`text_completion`: the engines complete token prompts),
 * `gen_ai.provider.name` (the engine), `gen_ai.request.model` (`--pretrain`),
 * `gen_ai.usage.output_tokens` (the step's generated tokens, `tokens`).
 *
 * Delivery is the other network trackers' ({@link Outbox}): batched in the background, bounded,
 * each request with a time limit; an endpoint that cannot be reached warns once and the run goes
 * on. Auth headers come from `OTEL_EXPORTER_OTLP_HEADERS` (never the command line).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { OtlpValue } from '../../gateway/otlp.ts';
import { FlagError } from '../driver-flags.ts';
import { Outbox, type Row, type Tracker, type TrackerRun, requestJson } from './tracker.ts';

/** Where and how spans are sent. */
export interface OtlpTarget {
  /** The full traces URL (`…/v1/traces`). */
  url: string;
  headers: Record<string, string>;
  /** `service.name` of the resource. */
  service: string;
  /** The policy model and the engine serving it, for the GenAI attributes. */
  model: string;
  engine: string;
  /** @default 2000 */
  flushIntervalMs?: number;
}

type Env = Readonly<Record<string, string | undefined>>;

/**
 * `--otlp-endpoint`'s traces URL. A value is a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` is
 * (`/v1/traces` is appended unless already there); the flag alone takes
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT`.
 */
export function otlpTracesUrl(flag: string, env: Env): string {
  const signal = flag === 'true' ? env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT : undefined;
  const base = flag === 'true' ? env.OTEL_EXPORTER_OTLP_ENDPOINT : flag;
  const url = signal || base;
  if (!url)
    throw new FlagError(
      '--otlp-endpoint',
      '--otlp-endpoint: give the receiver (--otlp-endpoint http://host:4318) or set OTEL_EXPORTER_OTLP_ENDPOINT',
    );
  if (!/^https?:\/\/[^/\s]+/.test(url))
    throw new FlagError(
      '--otlp-endpoint',
      `--otlp-endpoint: '${url}' is not an http(s) URL (rtjob sends OTLP/HTTP; a gRPC receiver listens on 4317, its HTTP side on 4318)`,
    );
  if (signal) return url;
  const trimmed = url.replace(/\/+$/, '');
  return /\/v1\/traces$/.test(trimmed) ? trimmed : `${trimmed}/v1/traces`;
}

/**
 * `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`: `k=v,k2=v2` with
 * percent-encoded values, as OpenTelemetry's exporters read them.
 */
export function otlpHeaders(env: Env): Record<string, string> {
  const text = env.OTEL_EXPORTER_OTLP_TRACES_HEADERS || env.OTEL_EXPORTER_OTLP_HEADERS || '';
  const out: Record<string, string> = {};
  for (const part of text.split(',')) {
    const at = part.indexOf('=');
    if (at <= 0) continue;
    const k = part.slice(0, at).trim().toLowerCase();
    const v = part.slice(at + 1).trim();
    try {
      out[k] = decodeURIComponent(v);
    } catch {
      out[k] = v;
    }
  }
  return out;
}

/** One span of OTLP/JSON. */
interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** 1 internal, 3 client. */
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: JsonAttribute[];
  status?: { code: number; message?: string };
}

interface JsonAttribute {
  key: string;
  value:
    | { stringValue: string }
    | { intValue: string }
    | { doubleValue: number }
    | { boolValue: boolean };
}

/** Attributes in OTLP/JSON: integers as `intValue` (int64, a decimal string), other numbers as doubles. */
export function jsonAttributes(a: Readonly<Record<string, OtlpValue>>): JsonAttribute[] {
  return Object.entries(a).map(([key, v]) => ({
    key,
    value:
      typeof v === 'string'
        ? { stringValue: v }
        : typeof v === 'boolean'
          ? { boolValue: v }
          : Number.isSafeInteger(v)
            ? { intValue: String(v) }
            : { doubleValue: v },
  }));
}

/** Unix milliseconds as OTLP's nanoseconds (microsecond precision). */
const nanos = (ms: number): string => (BigInt(Math.round(ms * 1000)) * 1000n).toString();
const hexId = (bytes: number): string => randomBytes(bytes).toString('hex');

/** The phases a step's row times, in the loop's order: its key, span name, whether it calls models. */
const phases: readonly { key: string; name: string; model: boolean }[] = [
  { key: 'generate_s', name: 'generate', model: true },
  { key: 'experience_s', name: 'experience', model: false },
  { key: 'train_s', name: 'train', model: false },
  { key: 'weight_sync_s', name: 'weight_sync', model: false },
  { key: 'eval_s', name: 'eval', model: true },
];

/** A logged row with its step's span: made by the step's first row, which {@link rowSpans} sends. */
export interface StepRow extends Row {
  stepSpanId: string;
  ownsStep: boolean;
}

/** The spans of one logged row under the run's trace. */
export function rowSpans(
  row: StepRow,
  trace: { traceId: string; runSpanId: string },
  t: Pick<OtlpTarget, 'model' | 'engine'>,
): JsonSpan[] {
  const v = row.values;
  const timed = phases.filter((p) => Number.isFinite(v[p.key]) && v[p.key]! >= 0);
  if (timed.length === 0 && !row.ownsStep) return [];
  const sum = timed.reduce((n, p) => n + v[p.key]! * 1000, 0);
  const stepId = row.stepSpanId;
  const out: JsonSpan[] = [];
  const end = row.time;
  // The first row of a step makes its span; a later row of the same step (an evaluation that ran
  // beside training, with --async-train) only adds its phases under it.
  if (row.ownsStep) {
    const stepMs = Number.isFinite(v.step_s)
      ? (v.step_s! + (Number.isFinite(v.eval_s) ? v.eval_s! : 0)) * 1000
      : sum;
    const attrs: Record<string, OtlpValue> = { 'rtjob.step': row.step };
    for (const k of ['reward_mean', 'kl', 'policy_loss', 'samples', 'version', 'staleness_mean'])
      if (Number.isFinite(v[k])) attrs[`rtjob.${k}`] = v[k]!;
    out.push({
      traceId: trace.traceId,
      spanId: stepId,
      parentSpanId: trace.runSpanId,
      name: `step ${row.step}`,
      kind: 1,
      startTimeUnixNano: nanos(end - stepMs),
      endTimeUnixNano: nanos(end),
      attributes: jsonAttributes(attrs),
    });
  }
  let at = end - sum;
  for (const p of timed) {
    const ms = v[p.key]! * 1000;
    const attrs: Record<string, OtlpValue> = { 'rtjob.step': row.step, 'rtjob.phase': p.name };
    if (p.model) {
      attrs['gen_ai.operation.name'] = 'text_completion';
      attrs['gen_ai.provider.name'] = t.engine;
      attrs['gen_ai.request.model'] = t.model;
      if (p.name === 'generate' && Number.isFinite(v.tokens))
        attrs['gen_ai.usage.output_tokens'] = v.tokens!;
      if (p.name === 'generate' && Number.isFinite(v.prompt_tokens))
        attrs['gen_ai.usage.input_tokens'] = v.prompt_tokens!;
    }
    out.push({
      traceId: trace.traceId,
      spanId: hexId(8),
      parentSpanId: stepId,
      // Named by phase: a phase is many model calls, not the one call GenAI's `{operation} {model}` names.
      name: p.name,
      kind: p.model ? 3 : 1,
      startTimeUnixNano: nanos(at),
      endTimeUnixNano: nanos(at + ms),
      attributes: jsonAttributes(attrs),
    });
    at += ms;
  }
  return out;
}

/** Opens the run's trace; spans are sent in the background, and a receiver that is away only warns. */
export function openOtlp(t: OtlpTarget, run: TrackerRun): Tracker {
  const warn = run.warn ?? ((l: string) => process.stderr.write(`${l}\n`));
  const trace = { traceId: hexId(16), runSpanId: hexId(8) };
  const stepSpan = new Map<number, string>();
  const started = Date.now();
  const post = (spans: JsonSpan[]) =>
    requestJson('otlp', t.url, {
      headers: t.headers,
      body: {
        resourceSpans: [
          {
            resource: {
              attributes: jsonAttributes({
                'service.name': t.service,
                'rtjob.program': run.program,
                'rtjob.run.name': run.name,
              }),
            },
            scopeSpans: [{ scope: { name: 'rtjob' }, spans }],
          },
        ],
      },
    });
  const outbox = new Outbox({
    kind: 'otlp',
    warn,
    ...(t.flushIntervalMs !== undefined ? { flushIntervalMs: t.flushIntervalMs } : {}),
    start: async () => {},
    async send(rows, taken) {
      const spans = rows.flatMap((r) => rowSpans(r as StepRow, trace, t));
      if (spans.length) await post(spans);
      taken(rows.length);
    },
  });
  return {
    kind: 'otlp',
    where: () => `${t.url} (trace ${trace.traceId})`,
    log(step, values) {
      const timed =
        Number.isFinite(values.step_s) || phases.some((p) => Number.isFinite(values[p.key]));
      const ownsStep = timed && !stepSpan.has(step);
      if (ownsStep) stepSpan.set(step, hexId(8));
      const row: StepRow = {
        step,
        time: Date.now(),
        values: { ...values },
        stepSpanId: stepSpan.get(step) ?? '',
        ownsStep,
      };
      outbox.push(row);
    },
    close(outcome, timeoutMs = 30_000) {
      return outbox.close(async () => {
        await post([
          {
            traceId: trace.traceId,
            spanId: trace.runSpanId,
            name: `${run.program} ${run.name}`,
            kind: 1,
            startTimeUnixNano: nanos(started),
            endTimeUnixNano: nanos(Date.now()),
            attributes: jsonAttributes({
              'rtjob.run.name': run.name,
              'rtjob.steps': stepSpan.size,
            }),
            status: outcome === 'failed' ? { code: 2, message: 'the run failed' } : { code: 1 },
          },
        ]);
      }, timeoutMs);
    },
  };
}
