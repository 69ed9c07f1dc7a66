/**
 * The Samples tab of a job: the episodes the job kept per step (`train_ppo --log-samples`), with
 * a step slider, a score filter (named as the job's report names its score: train_ppo's is
 * `reward`), and "this prompt over time" (one prompt's samples across every step). Each sample
 * shows its prompt, its turns (assistant, tool, environment, with tool calls), score, extraInfo,
 * versions, staleness, stop reason and lengths, and a gateway agent's own trace with its
 * completions in place (`trace-view.ts`).
 *
 * @module
 */
import { api, type SampleView } from './api.ts';
import { h } from './dom.ts';
import { traceView } from './trace-view.ts';

/**
 * Mounts the view in `root`; returns a function that reloads it (new samples arrived).
 * `scoreName` is what the job calls its samples' score.
 */
export function samplesView(
  root: HTMLElement,
  jobId: string,
  scoreName: string,
): () => Promise<void> {
  const state: { step: number | null; follow: boolean; key: string | null; score: string } = {
    step: null,
    follow: true,
    key: null,
    score: '',
  };
  const slider = h('input', {
    type: 'range',
    id: 'sample-step',
    min: 0,
    max: 0,
    value: 0,
    'aria-label': 'Step',
  }) as HTMLInputElement;
  const stepLabel = h('output', { id: 'sample-step-label', for: 'sample-step' });
  const scoreSel = h(
    'select',
    { id: 'sample-score', 'aria-label': `Filter by ${scoreName}` },
    h('option', { value: '' }, `any ${scoreName}`),
    h('option', { value: 'pos' }, `${scoreName} > 0`),
    h('option', { value: 'nonpos' }, `${scoreName} ≤ 0`),
  ) as HTMLSelectElement;
  const back = h('button', { id: 'sample-back', hidden: true }, '← back to steps');
  const title = h('p', { class: 'muted', id: 'samples-title' });
  const list = h('div', { class: 'samples', id: 'samples' });
  root.replaceChildren(
    h(
      'div',
      { class: 'toolbar' },
      h('label', { for: 'sample-step' }, 'Step '),
      slider,
      stepLabel,
      scoreSel,
      back,
    ),
    title,
    list,
  );
  let steps: number[] = [];

  const load = async () => {
    const query = {
      ...(state.key !== null
        ? { key: state.key }
        : state.step !== null && !state.follow
          ? { step: state.step }
          : {}),
      ...(state.score === 'pos'
        ? { minScore: 1e-12 }
        : state.score === 'nonpos'
          ? { maxScore: 0 }
          : {}),
    };
    const page = await api.call('GET /api/jobs/:jobId/samples', { params: { jobId }, query });
    steps = page.steps;
    slider.max = String(Math.max(0, steps.length - 1));
    if (state.key === null) {
      state.step = page.step;
      slider.value = String(Math.max(0, steps.indexOf(page.step ?? -1)));
    }
    slider.disabled = steps.length === 0 || state.key !== null;
    stepLabel.textContent =
      state.key !== null
        ? 'all steps'
        : page.step === null
          ? '–'
          : `${page.step} of ${steps.at(-1)}`;
    back.hidden = state.key === null;
    if (steps.length === 0) {
      title.textContent =
        'No samples yet. train_ppo keeps --log-samples N episodes per step (16 by default).';
      list.replaceChildren();
      return;
    }
    title.textContent =
      state.key !== null
        ? `Prompt #${state.key} over time: ${page.samples.length} samples`
        : `Step ${page.step}: ${page.samples.length} samples (best, worst and a random draw)`;
    list.replaceChildren(
      ...(page.samples as SampleView[]).map((s) =>
        sampleCard(s, scoreName, state.key !== null, (key) => {
          state.key = key;
          void load();
        }),
      ),
    );
  };
  slider.addEventListener('input', () => {
    const i = Number(slider.value);
    state.step = steps[i] ?? null;
    state.follow = i === steps.length - 1;
    void load();
  });
  scoreSel.addEventListener('change', () => {
    state.score = scoreSel.value;
    void load();
  });
  back.addEventListener('click', () => {
    state.key = null;
    void load();
  });
  return load;
}

const fmt = (x: number) => (Number.isInteger(x) ? String(x) : x.toFixed(3));

function sampleCard(
  s: SampleView,
  scoreName: string,
  overTime: boolean,
  showPrompt: (key: string) => void,
): HTMLElement {
  const facts = [
    overTime ? `step ${s.step}` : null,
    s.versionMin !== undefined
      ? `version ${s.versionMin === s.versionMax ? s.versionMin : `${s.versionMin}–${s.versionMax}`}`
      : null,
    s.staleness ? `staleness ${s.staleness}` : null,
    s.stopReason ? `stop: ${s.stopReason}` : null,
    s.responseTokens !== undefined
      ? `${s.promptTokens} prompt + ${s.responseTokens} generated tokens`
      : null,
    s.groupScoreMean !== undefined ? `group mean ${fmt(s.groupScoreMean)}` : null,
  ].filter((x): x is string => x !== null);
  const promptLink =
    s.key !== undefined && !overTime
      ? h('button', { class: 'small link', 'data-key': s.key }, `prompt #${s.key} over time`)
      : null;
  promptLink?.addEventListener('click', () => showPrompt(s.key!));
  return h(
    'article',
    { class: 'sample', 'data-pick': s.pick ?? '', 'data-step': s.step },
    h(
      'header',
      {},
      s.pick ? h('span', { class: 'badge', 'data-pick': s.pick }, s.pick) : null,
      s.score !== undefined
        ? h('strong', { class: 'score' }, `${scoreName} ${fmt(s.score)}`)
        : null,
      h('span', { class: 'muted' }, facts.join(' · ')),
      promptLink,
    ),
    h(
      'div',
      { class: 'turn', 'data-role': 'prompt' },
      h('span', { class: 'role' }, 'prompt'),
      h('pre', {}, s.prompt ?? ''),
    ),
    ...(s.turns ?? []).map((t) =>
      h(
        'div',
        { class: 'turn', 'data-role': t.role },
        h('span', { class: 'role' }, `${t.role} · ${t.tokens} tok`),
        h('pre', {}, t.text),
        ...(t.toolCalls ?? []).map((c) =>
          h('p', { class: 'tool-call' }, '→ ', h('code', {}, `${c.name}(${c.arguments})`)),
        ),
      ),
    ),
    s.label !== undefined ? h('p', { class: 'muted' }, 'label: ', h('code', {}, s.label)) : null,
    s.extraInfo && Object.keys(s.extraInfo).length
      ? h(
          'p',
          { class: 'extra' },
          'extraInfo: ',
          ...Object.entries(s.extraInfo).map(([k, v]) => h('code', {}, `${k}=${String(v)}`)),
        )
      : null,
    s.error ? h('pre', { class: 'error' }, s.error) : null,
    s.trace ? traceView(s.trace) : null,
  );
}
