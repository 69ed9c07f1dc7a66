/**
 * The verdict on a job's page: which side limits the run, its share of the wall-clock, how close
 * the run is to the overlap bound, and the one setting to change first, with the evidence on
 * demand. The same judgement `rtjob diagnose JOB` prints (`ops/diagnose.ts`, answered by the head).
 *
 * @module
 */
import type { Diagnosis } from '../../diagnose.ts';
import { h } from './dom.ts';

const pct = (x: number) => `${(x * 100).toFixed(0)}%`;

/** The verdict as a panel. */
export function verdictView(d: Diagnosis): HTMLElement {
  return h(
    'div',
    { class: 'verdict', 'data-limit': d.limit },
    h(
      'p',
      {},
      h('strong', {}, `Limited by ${d.limit}`),
      ` — ${pct(d.share)} of the wall-clock; at ${pct(d.attainment)} of the overlap bound (${d.steps} step(s), ${d.mode}). Change first: `,
      h('code', { class: 'change' }, `${d.change.flag} ${d.change.to}`),
      ` — ${d.change.why}`,
    ),
    h(
      'details',
      {},
      h('summary', {}, 'evidence'),
      h('ul', {}, ...d.evidence.map((e) => h('li', {}, e))),
    ),
  );
}
