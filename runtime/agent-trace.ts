/**
 * An agent episode's own OpenTelemetry trace, joined to the completions the gateway answered: the
 * spans the agent exported to the gateway (`POST /v1/traces`), and each model call with its
 * tokens, behaviour logprobs and policy versions, placed under the span it was made in. The
 * gateway builds it (`gateway/episode-trace.ts`), a kept sample carries it, and the dashboard's
 * Samples tab and `rtjob samples` draw it with {@link traceTree}. Lives in the runtime because
 * both the gateway and the operator plane read it.
 *
 * @module
 */

/** One span of the agent's trace, as a sample keeps it. */
export interface TraceSpan {
  /** 16 hex digits. */
  spanId: string;
  /** The parent span, absent for a root (or where the parent was not exported). */
  parentSpanId?: string;
  traceId: string;
  name: string;
  /** Start, in milliseconds since the episode's first span or call started. */
  startMs: number;
  durationMs: number;
  /** The span's error status message, or the exception it recorded. */
  error?: string;
  /** A few attributes (GenAI model and usage, tool names), values cut to 200 characters. */
  attributes?: Record<string, string | number | boolean>;
  /** The token counts the span reports, checked against the gateway's; absent when none. */
  usage?: SpanUsage;
}

/**
 * A span's own token counts (the GenAI conventions' `gen_ai.usage.input_tokens` and
 * `output_tokens`, their older `prompt_tokens` and `completion_tokens`, or the AI SDK's
 * `ai.usage.*`) next to what the gateway recorded for the model calls joined under it.
 */
export interface SpanUsage {
  input?: number;
  output?: number;
  /** Summed over the calls joined to the span or to its descendants; absent when none is. */
  recorded?: { input: number; output: number; calls: number };
}

/**
 * Where a span's token counts disagree with the gateway's for the calls under it, the two as text
 * (`span 59 in / 16 out, gateway 59 in / 17 out`); undefined when they agree or cannot be checked.
 */
export function usageMismatch(u: SpanUsage): string | undefined {
  const r = u.recorded;
  if (!r) return undefined;
  const inputOff = u.input !== undefined && u.input !== r.input;
  const outputOff = u.output !== undefined && u.output !== r.output;
  if (!inputOff && !outputOff) return undefined;
  return `span ${usageText(u)}, gateway ${r.input} in / ${r.output} out over ${r.calls} call${r.calls === 1 ? '' : 's'}`;
}

/** `59 in / 16 out`, with `?` for a count the span does not report. */
export function usageText(u: Pick<SpanUsage, 'input' | 'output'>): string {
  return `${u.input ?? '?'} in / ${u.output ?? '?'} out`;
}

/** One generated completion of a model call. */
export interface TracedCompletion {
  tokens: number;
  /** The first tokens as text with their logprobs (at most {@link shownTokens}). */
  shown: { text: string; logprob: number }[];
  /** Mean behaviour logprob over all its tokens. */
  meanLogprob: number;
  /** Oldest and newest policy version of its tokens (equal unless weights changed mid-answer). */
  versionMin: number;
  versionMax: number;
}

/** One model call the gateway answered for the episode. */
export interface TracedCall {
  /** The response id the client got (`chatcmpl-…`, `resp_…`, `msg_…`). */
  responseId: string;
  /**
   * The span it belongs to: its `traceparent`'s parent, a span naming its response id, or the
   * one model-call span (`gen_ai.operation.name` `chat`, …) naming none whose interval holds it.
   */
  spanId?: string;
  /** How it was joined: `traceparent`, `response_id` or `time`. */
  joinedBy?: 'traceparent' | 'response_id' | 'time';
  startMs: number;
  durationMs: number;
  promptTokens: number;
  completions: TracedCompletion[];
}

/** An episode's trace as a sample keeps it. */
export interface AgentTrace {
  traceIds: string[];
  /** Sorted by start. */
  spans: TraceSpan[];
  calls: TracedCall[];
  /** Spans refused over the limits or left out of the sample, counted. */
  droppedSpans: number;
  /** The latest model calls left out of the sample to keep it small, counted; absent when none. */
  droppedCalls?: number;
}

/** Tokens of a completion shown as text with their logprobs. */
export const shownTokens = 32;

/** A node of the drawn tree: a span with its children, or a model call. */
export type TraceNode =
  | { kind: 'span'; span: TraceSpan; children: TraceNode[] }
  | { kind: 'call'; call: TracedCall };

/**
 * Nests the spans under their parents, each model call under its span, children by start time.
 * A span whose parent was not exported, and a call joined to no span, are roots.
 *
 * @example
 * traceTree(t)   // [{ kind: 'span', span: run, children: [{ kind: 'span', span: step, children: [{ kind: 'call', … }] }] }]
 */
export function traceTree(t: AgentTrace): TraceNode[] {
  const nodes = new Map<string, { kind: 'span'; span: TraceSpan; children: TraceNode[] }>();
  for (const span of t.spans) nodes.set(span.spanId, { kind: 'span', span, children: [] });
  const roots: TraceNode[] = [];
  const start = (n: TraceNode): number => (n.kind === 'span' ? n.span.startMs : n.call.startMs);
  for (const n of nodes.values()) {
    const parent = n.span.parentSpanId === undefined ? undefined : nodes.get(n.span.parentSpanId);
    (parent && parent !== n ? parent.children : roots).push(n);
  }
  for (const call of t.calls) {
    const parent = call.spanId === undefined ? undefined : nodes.get(call.spanId);
    (parent ? parent.children : roots).push({ kind: 'call', call });
  }
  const sort = (list: TraceNode[]): void => {
    list.sort((a, b) => start(a) - start(b));
    for (const n of list) if (n.kind === 'span') sort(n.children);
  };
  sort(roots);
  return roots;
}

/** `v3` or `v3–4`: the versions a completion's tokens were generated by. */
export function versionText(c: Pick<TracedCompletion, 'versionMin' | 'versionMax'>): string {
  return c.versionMin === c.versionMax ? `v${c.versionMin}` : `v${c.versionMin}–${c.versionMax}`;
}

/**
 * The tree as indented text lines (`rtjob samples`): spans with their durations and errors, calls
 * with each completion's tokens, mean logprob, versions and first tokens.
 */
export function traceLines(t: AgentTrace): string[] {
  const out: string[] = [];
  const walk = (list: TraceNode[], depth: number): void => {
    const pad = '  '.repeat(depth);
    for (const n of list) {
      if (n.kind === 'span') {
        const s = n.span;
        const off = s.usage && usageMismatch(s.usage);
        const usage = !s.usage
          ? ''
          : off
            ? `  tokens MISMATCH ${off}`
            : `  tokens ${usageText(s.usage)}${s.usage.recorded ? ' (= gateway)' : ''}`;
        out.push(
          `${pad}${s.name}  ${ms(s.durationMs)}${usage}${s.error !== undefined ? `  ERROR ${s.error}` : ''}`,
        );
        walk(n.children, depth + 1);
        continue;
      }
      const c = n.call;
      out.push(`${pad}model call ${c.responseId}  ${ms(c.durationMs)}  prompt ${c.promptTokens}`);
      for (const [i, k] of c.completions.entries()) {
        const shown = k.shown.map((x) => `${JSON.stringify(x.text)}:${x.logprob.toFixed(2)}`);
        out.push(
          `${pad}  #${i} ${k.tokens} tokens  ${versionText(k)}  mean logprob ${k.meanLogprob.toFixed(3)}  ${shown.join(' ')}${k.tokens > k.shown.length ? ' …' : ''}`,
        );
      }
    }
  };
  walk(traceTree(t), 0);
  if (t.droppedSpans > 0) out.push(`(${t.droppedSpans} spans not kept)`);
  if (t.droppedCalls) out.push(`(${t.droppedCalls} later model calls not kept)`);
  return out;
}

function ms(x: number): string {
  return x >= 1000 ? `${(x / 1000).toFixed(2)}s` : `${x.toFixed(1)}ms`;
}
