/**
 * One episode's trace as the gateway collects it: the spans the agent's OpenTelemetry exporter
 * posts to `POST /v1/traces` with the episode's key, and every model call the gateway answered
 * for that key (response id, the `traceparent` it carried, its tokens, logprobs and versions).
 * {@link EpisodeTrace.build} joins them (`runtime/agent-trace.ts`): a call belongs to the span its
 * `traceparent` names as parent, or else to the innermost span whose `gen_ai.response.id` (or
 * the AI SDK's `ai.response.id`) is the id the gateway answered with, or else (Mastra, whose
 * spans name neither) to the one model-call span whose interval holds the call's. A span that
 * reports its tokens (`gen_ai.usage.*`) carries them next to the gateway's count for the calls
 * under it, so a disagreement between what the agent saw and what is trained shows. Bounded:
 * spans past {@link traceLimits} are refused with OTLP's `partialSuccess`, and what a sample keeps
 * is cut to fit its size.
 *
 * @module
 */
import {
  shownTokens,
  type AgentTrace,
  type SpanUsage,
  type TraceSpan,
  type TracedCall,
} from '../runtime/agent-trace.ts';
import type { OtlpSpan, OtlpValue, PartialSuccess } from './otlp.ts';

/** How much of an agent's trace the gateway takes and a sample keeps. */
export const traceLimits = {
  /** Spans accepted per episode; the rest are refused (`partialSuccess.rejectedSpans`). */
  maxSpans: 2048,
  /** Bytes of one `POST /v1/traces` body; more is a 413. */
  maxBodyBytes: 4 << 20,
  /** Spans a kept sample carries (the earliest; the rest are counted). */
  sampleSpans: 120,
  /** Model calls a kept sample shows with their first tokens (later ones with counts only). */
  sampleCallsWithTokens: 32,
  /** Attributes kept per span, and characters per value. */
  maxAttributes: 8,
  maxValueChars: 200,
  /**
   * Bytes of JSON a kept sample's trace may take (a sample is at most 64 KiB, with its turns):
   * past it the latest spans go, then the latest calls' token text.
   */
  sampleBytes: 24 * 1024,
} as const;

/** A model call as the gateway saw it. */
export interface CallRecord {
  responseId: string;
  /** From the request's `traceparent`. */
  traceId?: string;
  parentSpanId?: string;
  /** Unix time in milliseconds. */
  startMs: number;
  endMs: number;
  promptTokens: number;
  completions: { ids: number[]; logprobs: number[]; versions: number[] }[];
}

/** The attributes a sample keeps: the GenAI conventions' and the AI SDK's model, usage, tools. */
const keptAttribute =
  /^(gen_ai\.(operation\.name|request\.model|response\.(id|model|finish_reasons)|usage\.|tool\.name|system|provider\.name)|ai\.(model\.id|toolCall\.name|response\.(id|finishReason)|usage\.|operationId)|error\.type|tool\.name)/;

const responseIdKeys = ['gen_ai.response.id', 'ai.response.id'];

/** The GenAI conventions' `gen_ai.operation.name` of a span that is one model call. */
const inferenceOperations = new Set(['chat', 'text_completion', 'generate_content']);

/**
 * How far a call's interval may stick out of its span's, in ms: span times of whole
 * milliseconds (Mastra's come from `Date`) against the gateway's sub-millisecond ones.
 */
const clockSlackMs = 1;

/** Spans and calls of one episode, joined on {@link build}. */
export class EpisodeTrace {
  private readonly spans: OtlpSpan[] = [];
  private readonly calls: CallRecord[] = [];
  private refused = 0;

  /** Takes the spans of one export while under the limit; the rest are refused, counted. */
  addSpans(spans: OtlpSpan[]): PartialSuccess | undefined {
    const room = Math.max(0, traceLimits.maxSpans - this.spans.length);
    this.spans.push(...spans.slice(0, room));
    const rejected = spans.length - Math.min(room, spans.length);
    if (rejected === 0) return undefined;
    this.refused += rejected;
    return {
      rejectedSpans: rejected,
      errorMessage: `rtjob gateway: an episode keeps at most ${traceLimits.maxSpans} spans; ${rejected} refused`,
    };
  }

  addCall(c: CallRecord): void {
    this.calls.push(c);
  }

  /** Spans received so far. */
  get spanCount(): number {
    return this.spans.length;
  }

  /**
   * The joined trace, cut to what a sample keeps; `decode` renders one token id as text.
   * Undefined when the agent exported no span and no call carried a `traceparent`.
   */
  build(decode: (id: number) => string): AgentTrace | undefined {
    if (this.spans.length === 0 && !this.calls.some((c) => c.traceId)) return undefined;
    const origin = Math.min(
      ...this.spans.map((s) => s.startMs),
      ...this.calls.map((c) => c.startMs),
    );
    const byId = new Map(this.spans.map((s) => [s.spanId, s]));
    const kept = [...this.spans]
      .sort((a, b) => a.startMs - b.startMs)
      .slice(0, traceLimits.sampleSpans);
    const keptIds = new Set(kept.map((s) => s.spanId));
    const traceIds = new Set<string>();
    for (const s of this.spans) traceIds.add(s.traceId);
    for (const c of this.calls) if (c.traceId) traceIds.add(c.traceId);
    // Joined over all spans, kept or not: a run's span counts the calls of steps cut from the sample.
    const joins = this.calls.map((c) => this.join(c, byId));
    const calls = this.calls.map((c, i): TracedCall => {
      const join = joins[i];
      return {
        responseId: c.responseId,
        ...(join && keptIds.has(join.spanId) ? join : {}),
        startMs: c.startMs - origin,
        durationMs: c.endMs - c.startMs,
        promptTokens: c.promptTokens,
        completions: c.completions.map((k) => {
          const versions = k.versions.filter((v) => v >= 0);
          const n = i < traceLimits.sampleCallsWithTokens ? shownTokens : 0;
          return {
            tokens: k.ids.length,
            shown: k.ids.slice(0, n).map((id, t) => ({
              text: decode(id),
              logprob: round(k.logprobs[t] ?? 0),
            })),
            meanLogprob: round(k.logprobs.reduce((a, b) => a + b, 0) / Math.max(1, k.ids.length)),
            versionMin: versions.length ? Math.min(...versions) : -1,
            versionMax: versions.length ? Math.max(...versions) : -1,
          };
        }),
      };
    });
    const recorded = recordedUnder(calls, joins, byId);
    const spans = kept.map((s) => keptSpan(s, origin, recorded.get(s.spanId)));
    const cut = fit(spans, calls);
    return {
      traceIds: [...traceIds],
      spans,
      calls,
      droppedSpans: this.refused + this.spans.length - spans.length,
      ...(cut > 0 ? { droppedCalls: cut } : {}),
    };
  }

  /** The span a call belongs to, and how that is known. */
  private join(
    c: CallRecord,
    byId: Map<string, OtlpSpan>,
  ): { spanId: string; joinedBy: NonNullable<TracedCall['joinedBy']> } | undefined {
    if (c.parentSpanId !== undefined && byId.has(c.parentSpanId))
      return { spanId: c.parentSpanId, joinedBy: 'traceparent' };
    // The AI SDK names the response on its call span and on the enclosing one: take the innermost.
    let best: OtlpSpan | undefined;
    for (const s of this.spans) {
      if (!responseIdKeys.some((k) => s.attributes[k] === c.responseId)) continue;
      if (!best || s.endMs - s.startMs < best.endMs - best.startMs) best = s;
    }
    if (best) return { spanId: best.spanId, joinedBy: 'response_id' };
    // Mastra names neither (its tracing is its own, its model-call span carries no response id):
    // the one model-call span that names no response and whose interval holds the call's, on
    // the clock the agent and the gateway share on one machine. Two candidates join neither.
    const holding = this.spans.filter(
      (s) =>
        inferenceOperations.has(String(s.attributes['gen_ai.operation.name'])) &&
        !responseIdKeys.some((k) => k in s.attributes) &&
        s.startMs - clockSlackMs <= c.startMs &&
        c.endMs <= s.endMs + clockSlackMs,
    );
    return holding.length === 1 ? { spanId: holding[0]!.spanId, joinedBy: 'time' } : undefined;
  }
}

/**
 * Cuts a trace to {@link traceLimits}`.sampleBytes` of JSON, in place: the latest calls' token
 * text while the calls take more than half, then the latest spans (a call under one that goes is
 * no longer joined), then more token text, then the latest calls. Returns the calls cut.
 */
function fit(spans: TraceSpan[], calls: TracedCall[]): number {
  const budget = traceLimits.sampleBytes;
  const bytes = (x: unknown) => Buffer.byteLength(JSON.stringify(x)) + 1;
  let callBytes = bytes(calls);
  let spanBytes = bytes(spans);
  let textFrom = calls.length; // calls from here on have no token text
  const dropText = (until: () => boolean) => {
    while (textFrom > 0 && !until()) {
      for (const k of calls[--textFrom]!.completions) {
        callBytes -= bytes(k.shown) - bytes([]);
        k.shown = [];
      }
    }
  };
  dropText(() => callBytes <= budget / 2);
  while (spanBytes + callBytes > budget && spans.length > 0) spanBytes -= bytes(spans.pop());
  const left = new Set(spans.map((s) => s.spanId));
  for (const c of calls) {
    if (c.spanId === undefined || left.has(c.spanId)) continue;
    callBytes -= bytes({ spanId: c.spanId, joinedBy: c.joinedBy }) - bytes({});
    delete c.spanId;
    delete c.joinedBy;
  }
  dropText(() => spanBytes + callBytes <= budget);
  let cut = 0;
  while (spanBytes + callBytes > budget && calls.length > 0) {
    callBytes -= bytes(calls.pop());
    cut++;
  }
  return cut;
}

/** Span attributes naming its input and output tokens, the first one present wins. */
const usageKeys = {
  input: [
    'gen_ai.usage.input_tokens',
    'gen_ai.usage.prompt_tokens',
    'ai.usage.inputTokens',
    'ai.usage.promptTokens',
  ],
  output: [
    'gen_ai.usage.output_tokens',
    'gen_ai.usage.completion_tokens',
    'ai.usage.outputTokens',
    'ai.usage.completionTokens',
  ],
};

function usageCount(a: Record<string, OtlpValue>, keys: string[]): number | undefined {
  for (const k of keys) {
    const v = typeof a[k] === 'string' && a[k] !== '' ? Number(a[k]) : a[k];
    if (typeof v === 'number' && Number.isFinite(v)) return v;
  }
  return undefined;
}

/**
 * The tokens the gateway recorded under each span: every joined call counted at its span and at
 * each of that span's ancestors (a run's span reports the sum of its steps).
 */
function recordedUnder(
  calls: TracedCall[],
  joins: ({ spanId: string } | undefined)[],
  byId: Map<string, OtlpSpan>,
): Map<string, NonNullable<SpanUsage['recorded']>> {
  const out = new Map<string, NonNullable<SpanUsage['recorded']>>();
  for (const [i, c] of calls.entries()) {
    const output = c.completions.reduce((n, k) => n + k.tokens, 0);
    const seen = new Set<string>();
    for (
      let id = joins[i]?.spanId;
      id !== undefined && !seen.has(id);
      id = byId.get(id)?.parentSpanId
    ) {
      seen.add(id);
      const r = out.get(id) ?? { input: 0, output: 0, calls: 0 };
      r.input += c.promptTokens;
      r.output += output;
      r.calls += 1;
      out.set(id, r);
    }
  }
  return out;
}

function keptSpan(
  s: OtlpSpan,
  origin: number,
  recorded: SpanUsage['recorded'] | undefined,
): TraceSpan {
  const input = usageCount(s.attributes, usageKeys.input);
  const output = usageCount(s.attributes, usageKeys.output);
  const usage: SpanUsage | undefined =
    input === undefined && output === undefined
      ? undefined
      : {
          ...(input !== undefined ? { input } : {}),
          ...(output !== undefined ? { output } : {}),
          ...(recorded ? { recorded } : {}),
        };
  const attributes: Record<string, OtlpValue> = {};
  let n = 0;
  for (const [k, v] of Object.entries(s.attributes)) {
    if (!keptAttribute.test(k) || n++ >= traceLimits.maxAttributes) continue;
    attributes[k] = typeof v === 'string' ? v.slice(0, traceLimits.maxValueChars) : v;
  }
  const exception = s.events.find((e) => e.name === 'exception')?.attributes['exception.message'];
  const error = s.error
    ? s.statusMessage || (exception !== undefined ? String(exception) : 'error')
    : undefined;
  return {
    spanId: s.spanId,
    ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
    traceId: s.traceId,
    name: s.name,
    startMs: round(s.startMs - origin),
    durationMs: round(Math.max(0, s.endMs - s.startMs)),
    ...(error !== undefined ? { error: error.slice(0, traceLimits.maxValueChars) } : {}),
    ...(n > 0 ? { attributes } : {}),
    ...(usage ? { usage } : {}),
  };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
