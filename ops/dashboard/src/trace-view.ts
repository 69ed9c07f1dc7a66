/**
 * An agent episode's own trace in a sample card: its spans nested as the agent made them, each
 * with a bar placing it on the episode's timeline, its duration and its error, and each model call
 * under its span with every completion's tokens (the first ones as text, their logprobs on hover
 * and as the shade), mean logprob and policy version (`runtime/agent-trace.ts`).
 *
 * @module
 */
import {
  traceTree,
  usageMismatch,
  usageText,
  versionText,
  type AgentTrace,
  type SpanUsage,
  type TraceNode,
  type TracedCall,
} from '../../../runtime/agent-trace.ts';
import { h } from './dom.ts';

const ms = (x: number) => (x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(1)} ms`);

/** The trace as a collapsible tree. */
export function traceView(t: AgentTrace): HTMLElement {
  const end = Math.max(
    1,
    ...t.spans.map((s) => s.startMs + s.durationMs),
    ...t.calls.map((c) => c.startMs + c.durationMs),
  );
  const bar = (start: number, duration: number, error: boolean) => {
    // Not `.bar`: that is the dashboard's labelled progress bar (a grid with margins), whose
    // margins would collapse this 6-pixel bar to nothing.
    const b = h('span', {
      class: error ? 'span-bar error' : 'span-bar',
      'data-start': start.toFixed(3),
      'data-duration': duration.toFixed(3),
    });
    // Set through the CSSOM: the dashboard's content security policy refuses inline styles.
    b.style.left = `${(100 * start) / end}%`;
    b.style.width = `${Math.max(0.5, (100 * duration) / end)}%`;
    return h('span', { class: 'timeline' }, b);
  };
  const node = (n: TraceNode): HTMLElement => {
    if (n.kind === 'call') return callRow(n.call, bar(n.call.startMs, n.call.durationMs, false));
    const s = n.span;
    return h(
      'li',
      { class: 'span', 'data-span': s.spanId, 'data-error': s.error !== undefined },
      h(
        'div',
        { class: 'row' },
        h('code', { class: 'name' }, s.name),
        h('span', { class: 'muted' }, ms(s.durationMs)),
        s.usage ? usageTag(s.usage) : null,
        s.error !== undefined ? h('span', { class: 'span-error' }, `error: ${s.error}`) : null,
        bar(s.startMs, s.durationMs, s.error !== undefined),
      ),
      n.children.length ? h('ul', {}, ...n.children.map(node)) : null,
    );
  };
  const errors = t.spans.filter((s) => s.error !== undefined).length;
  return h(
    'details',
    { class: 'trace', open: true },
    h(
      'summary',
      {},
      `agent trace · ${t.spans.length} spans · ${t.calls.length} model calls`,
      errors ? ` · ${errors} with errors` : '',
      t.droppedSpans ? ` · ${t.droppedSpans} spans not kept` : '',
      t.droppedCalls ? ` · ${t.droppedCalls} later model calls not kept` : '',
    ),
    h('ul', { class: 'trace-tree' }, ...traceTree(t).map(node)),
  );
}

/** The span's token counts: plain where the gateway agrees, marked where it does not. */
function usageTag(u: SpanUsage): HTMLElement {
  const off = usageMismatch(u);
  const state = off ? 'mismatch' : u.recorded ? 'match' : 'unjoined';
  return h(
    'span',
    {
      class: 'span-usage',
      'data-usage': state,
      title: off
        ? `the span's token counts differ from the gateway's: ${off}`
        : u.recorded
          ? `equal to the gateway's count over ${u.recorded.calls} model call(s)`
          : 'no model call is joined under this span: not checked',
    },
    off ? `tokens ≠ gateway: ${off}` : `${usageText(u)} tok${u.recorded ? ' ✓' : ''}`,
  );
}

function callRow(c: TracedCall, timeline: HTMLElement): HTMLElement {
  return h(
    'li',
    { class: 'call', 'data-response': c.responseId, 'data-joined': c.joinedBy ?? 'none' },
    h(
      'div',
      { class: 'row' },
      h('span', { class: 'role' }, 'model call'),
      h('code', {}, c.responseId),
      h('span', { class: 'muted' }, `${ms(c.durationMs)} · prompt ${c.promptTokens} tok`),
      timeline,
    ),
    ...c.completions.map((k, i) =>
      h(
        'div',
        { class: 'completion', 'data-index': i },
        h(
          'span',
          { class: 'muted' },
          `${k.tokens} tok · ${versionText(k)} · mean logprob ${k.meanLogprob.toFixed(3)} `,
        ),
        h(
          'span',
          { class: 'tokens' },
          ...k.shown.map((x) => {
            const t = h('span', { class: 'tok', title: `logprob ${x.logprob.toFixed(3)}` }, x.text);
            t.style.opacity = (0.35 + 0.65 * Math.exp(x.logprob)).toFixed(2);
            return t;
          }),
          k.tokens > k.shown.length ? h('span', { class: 'muted' }, ' …') : null,
        ),
      ),
    ),
  );
}
