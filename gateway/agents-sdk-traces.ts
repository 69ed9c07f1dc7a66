/**
 * The OpenAI Agents SDK's own trace export (`POST /v1/traces/ingest`, the body its
 * `OpenAITracingExporter` sends: `{ data: [trace | span, …] }`, each span its `toJSON()`), read
 * into the same {@link OtlpSpan}s an OTLP exporter gives, so an Agents SDK agent's trace joins its
 * model calls as an OpenTelemetry one does. The SDK's tracing is not OpenTelemetry: its spans are
 * typed records (`agent`, `turn`, `generation`, `response`, `function`, `handoff`, …) with ISO
 * times and `trace_…`/`span_…` ids. Here each becomes a span named after its type, its fields
 * mapped to the GenAI conventions' attributes (`gen_ai.agent.name`, `gen_ai.tool.name`,
 * `gen_ai.request.model`, `gen_ai.response.id`, `gen_ai.usage.input_tokens`/`output_tokens`),
 * and its ids to OTLP's hex (the SDK's own hex digits where they fit, a hash otherwise). The trace
 * records (`object: 'trace'`) carry no times and are skipped.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { GatewayError } from './errors.ts';
import type { OtlpSpan, OtlpValue } from './otlp.ts';

/** Reads the Agents SDK exporter's JSON body (already parsed). */
export function spansFromAgentsSdk(body: unknown): OtlpSpan[] {
  const data = record(body)?.['data'];
  if (!Array.isArray(data)) throw invalid('the body must be { data: [...] }');
  const out: OtlpSpan[] = [];
  for (const item of data) {
    const o = record(item);
    if (!o) throw invalid('each item must be an object');
    if (o['object'] === 'trace') continue;
    if (o['object'] !== 'trace.span') throw invalid(`unknown item ${JSON.stringify(o['object'])}`);
    out.push(span(o));
  }
  return out;
}

function span(o: Record<string, unknown>): OtlpSpan {
  if (typeof o['id'] !== 'string' || typeof o['trace_id'] !== 'string')
    throw invalid('a span without its id and trace_id');
  const data = record(o['span_data']) ?? {};
  const error = record(o['error']);
  const parent = o['parent_id'];
  const { name, attributes } = described(data);
  return {
    traceId: hexId(o['trace_id'], 'trace_', 32),
    spanId: hexId(o['id'], 'span_', 16),
    ...(typeof parent === 'string' && parent !== ''
      ? { parentSpanId: hexId(parent, 'span_', 16) }
      : {}),
    name,
    startMs: time(o['started_at']),
    endMs: time(o['ended_at'] ?? o['started_at']),
    error: error !== undefined,
    statusMessage: error ? String(error['message'] ?? 'error') : '',
    attributes,
    events: [],
  };
}

/** The span's name and its GenAI attributes, by the SDK's span type. */
function described(d: Record<string, unknown>): {
  name: string;
  attributes: Record<string, OtlpValue>;
} {
  const a: Record<string, OtlpValue> = {};
  const put = (k: string, v: unknown) => {
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') a[k] = v;
  };
  const usage = (u: unknown) => {
    const r = record(u);
    put('gen_ai.usage.input_tokens', r?.['input_tokens'] ?? r?.['prompt_tokens']);
    put('gen_ai.usage.output_tokens', r?.['output_tokens'] ?? r?.['completion_tokens']);
  };
  const type = String(d['type'] ?? 'span');
  // `turn` and `task` travel as custom spans with their fields under `data`.
  const custom = record(d['data']);
  const sdkType = type === 'custom' ? custom?.['sdk_span_type'] : undefined;
  if (type === 'agent') {
    put('gen_ai.operation.name', 'invoke_agent');
    put('gen_ai.agent.name', d['name']);
    return { name: `agent ${String(d['name'] ?? '')}`.trim(), attributes: a };
  }
  if (sdkType === 'turn') {
    put('gen_ai.agent.name', custom?.['agent_name']);
    usage(custom?.['usage']);
    return { name: `turn ${String(custom?.['turn'] ?? '')}`.trim(), attributes: a };
  }
  if (sdkType === 'task') {
    usage(custom?.['usage']);
    return { name: `task ${String(custom?.['name'] ?? '')}`.trim(), attributes: a };
  }
  if (type === 'generation') {
    // The chat completions model records the completion it got as `output[0]`.
    const response = Array.isArray(d['output']) ? record(d['output'][0]) : undefined;
    put('gen_ai.operation.name', 'chat');
    put('gen_ai.request.model', d['model']);
    put('gen_ai.response.id', response?.['id']);
    usage(d['usage'] ?? response?.['usage']);
    return { name: 'generation', attributes: a };
  }
  if (type === 'response') {
    put('gen_ai.operation.name', 'chat');
    put('gen_ai.response.id', d['response_id']);
    usage(record(d['_response'])?.['usage']);
    return { name: 'response', attributes: a };
  }
  if (type === 'function') {
    put('gen_ai.operation.name', 'execute_tool');
    put('gen_ai.tool.name', d['name']);
    return { name: `function ${String(d['name'] ?? '')}`.trim(), attributes: a };
  }
  if (type === 'handoff') {
    put('gen_ai.agent.name', d['to_agent']);
    return {
      name: `handoff ${String(d['from_agent'] ?? '?')} → ${String(d['to_agent'] ?? '?')}`,
      attributes: a,
    };
  }
  const label = type === 'custom' ? (custom?.['name'] ?? d['name']) : d['name'];
  return { name: typeof label === 'string' ? `${type} ${label}` : type, attributes: a };
}

/** `trace_<32 hex>` → the hex; any other id → the first `len` hex digits of its SHA-256. */
function hexId(v: string, prefix: string, len: number): string {
  const bare = v.startsWith(prefix) ? v.slice(prefix.length) : v;
  if (bare.length === len && /^[0-9a-f]+$/i.test(bare)) return bare.toLowerCase();
  return createHash('sha256').update(v).digest('hex').slice(0, len);
}

function time(v: unknown): number {
  const ms = typeof v === 'string' ? Date.parse(v) : NaN;
  if (!Number.isFinite(ms))
    throw invalid(`a span time must be an ISO date, got ${JSON.stringify(v)}`);
  return ms;
}

function record(v: unknown): Record<string, unknown> | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

function invalid(message: string): GatewayError {
  return new GatewayError(400, 'invalid_request', `Agents SDK traces: ${message}`, 'body');
}
