/**
 * The dashboard: a hash router over four views (cluster, jobs, job, actors, actor), refreshed by
 * live events from the head. Every table the server can page is paged on the server.
 *
 * @module
 */
import {
  type ActorPageQuery,
  type ActorView,
  api,
  connectLive,
  type JobInfo,
  logTailPath,
  type MetricsEvent,
  type NodeView,
  onLive,
  type ProcessView,
} from './api.ts';
import { MetricCharts, tokensMetric, type XAxis } from './charts.ts';
import { configTable, diffTable, jobSummary } from './job-summary.ts';
import { samplesView } from './samples-view.ts';
import { bytes, duration } from '../../format.ts';
import { badge, bar, confirmAction, h, time, toast } from './dom.ts';

const main = document.getElementById('main') as HTMLElement;
/** Cleanup of the current view (timers, sockets, subscriptions). */
let teardown: (() => void)[] = [];
/** Set when the head serves a finished session: nothing can be changed from the page. */
let readOnly = false;
const readOnlyWhy = 'a finished session, served read-only (no cluster running)';
/** The job page on screen, so switching its tabs does not rebuild it. */
let jobPage: { jobId: string; show(tab: string | undefined): void } | null = null;

function route(): void {
  const parts0 = location.hash
    .replace(/^#\/?/, '')
    .split('/')
    .filter(Boolean)
    .map(decodeURIComponent);
  if (parts0[0] === 'jobs' && parts0[1] && jobPage?.jobId === parts0[1]) {
    jobPage.show(parts0[2]);
    return;
  }
  jobPage = null;
  for (const f of teardown) f();
  teardown = [];
  const parts = location.hash
    .replace(/^#\/?/, '')
    .split('/')
    .filter(Boolean)
    .map(decodeURIComponent);
  for (const a of Array.from(document.querySelectorAll('header nav a'))) {
    const target = (a as HTMLAnchorElement).hash.replace(/^#\/?/, '');
    a.toggleAttribute('aria-current', (parts[0] ?? '') === target);
  }
  main.replaceChildren();
  const [view, id, sub] = parts;
  const done =
    view === 'jobs' && id
      ? jobView(id, sub)
      : view === 'jobs'
        ? jobsView()
        : view === 'actors' && id
          ? actorView(id)
          : view === 'actors'
            ? actorsView()
            : clusterView();
  done.catch((err: Error) =>
    main.replaceChildren(
      h('p', { class: 'error', role: 'alert' }, `Could not load: ${err.message}`),
    ),
  );
}

/** Re-runs `load` on the events named, at most every `minMs`. */
function refreshOn(
  events: string[],
  load: () => Promise<void>,
  match: (data: unknown) => boolean = () => true,
  minMs = 500,
): void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let last = 0;
  const off = onLive((event, data) => {
    if (!events.includes(event) || !match(data) || timer) return;
    timer = setTimeout(
      () => {
        timer = undefined;
        last = Date.now();
        void load().catch(() => undefined);
      },
      Math.max(0, minMs - (Date.now() - last)),
    );
  });
  teardown.push(off, () => timer && clearTimeout(timer));
}

function jobLink(id: string): HTMLElement {
  return h('a', { href: `#/jobs/${encodeURIComponent(id)}` }, id);
}

function jobDuration(j: JobInfo): string {
  return j.startedAt ? duration((j.endedAt ?? Date.now()) - j.startedAt) : '–';
}

// ---- cluster ---------------------------------------------------------------------------------

async function clusterView(): Promise<void> {
  const section = h('section', { 'aria-labelledby': 'cluster-h' });
  main.append(h('h1', { id: 'cluster-h' }, 'Cluster'), section);
  const load = async () => {
    const [s, jobs] = await Promise.all([
      api.call('GET /api/cluster'),
      api.call('GET /api/jobs', { query: { limit: 8 } }),
    ]);
    const count = (m: Record<string, number>) =>
      Object.entries(m)
        .map(([k, v]) => `${v} ${k.toLowerCase()}`)
        .join(' · ') || 'none';
    section.replaceChildren(
      h(
        'div',
        { class: 'cards' },
        h(
          'div',
          { class: 'card' },
          h('h2', {}, 'Nodes'),
          h('p', { class: 'big' }, s.nodes.filter((n) => n.state === 'ALIVE').length),
        ),
        h('div', { class: 'card' }, h('h2', {}, 'Actors'), h('p', {}, count(s.actorsByState))),
        h('div', { class: 'card' }, h('h2', {}, 'Jobs'), h('p', {}, count(s.jobsByStatus))),
      ),
      h('h2', {}, 'Nodes'),
      h(
        'div',
        { class: 'scroll' },
        h(
          'table',
          { class: 'nodes' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', {}, 'Node'),
              h('th', {}, 'State'),
              h('th', { title: 'What the machine uses now, sampled by its node agent' }, 'In use'),
              h('th', { title: 'What actors reserved' }, 'Reserved'),
              h('th', {}, 'Workers'),
            ),
          ),
          h(
            'tbody',
            {},
            s.nodes.map((n) => {
              const resources = Object.keys(n.resourcesTotal).map((k) => {
                const total = n.resourcesTotal[k] ?? 0;
                const used = total - (n.resourcesAvailable[k] ?? total);
                const text =
                  k === 'memory'
                    ? `${bytes(used)} / ${bytes(total)}`
                    : `${+used.toFixed(2)} / ${total}`;
                return bar(k, used, total, text);
              });
              const usage = [
                bar(
                  'CPU',
                  n.cpuPercent ?? 0,
                  100,
                  n.cpuPercent === null
                    ? '–'
                    : `${n.cpuPercent.toFixed(0)}%` + (n.cpuCount ? ` of ${n.cpuCount} cores` : ''),
                ),
                bar(
                  'Memory',
                  n.memoryUsedBytes,
                  n.memoryTotalBytes,
                  n.memoryTotalBytes
                    ? `${bytes(n.memoryUsedBytes)} / ${bytes(n.memoryTotalBytes)}`
                    : '–',
                ),
              ];
              return h(
                'tr',
                { 'data-node': n.nodeId },
                h(
                  'td',
                  {},
                  h('strong', {}, n.hostname),
                  h('br'),
                  h('code', {}, n.nodeId),
                  n.isHead ? h('span', { class: 'tag' }, 'head') : null,
                ),
                h('td', {}, badge(n.state)),
                h('td', { class: 'resources usage' }, usage),
                h('td', { class: 'resources' }, resources),
                h('td', {}, n.workers),
              );
            }),
          ),
        ),
      ),
      processesTable(s.nodes),
      h('h2', {}, 'Recent jobs'),
      jobsTable(jobs.jobs),
    );
  };
  await load();
  refreshOn(['cluster', 'job'], load, () => true, 1000);
  const timer = setInterval(() => void load().catch(() => undefined), 5000);
  teardown.push(() => clearInterval(timer));
}

/** A process's sampled CPU (100% = one core), or a dash before its second sample. */
function cpuText(x: number | null): string {
  return x === null ? '–' : `${x.toFixed(1)}%`;
}

/** A process's sampled resident memory, or a dash where it is not known. */
function rssText(x: number | null): string {
  return x === null ? '–' : bytes(x);
}

/** What a row of the Processes table is: the head, a node agent, a job's driver or an actor. */
function processLabel(n: NodeView, p: ProcessView): HTMLElement | string {
  switch (p.kind) {
    case 'head':
      // A head running its node agent in its own process lists that process once.
      return h(
        'strong',
        {},
        n.processes.some((x) => x.kind === 'agent') ? 'head' : 'head + node agent',
      );
    case 'agent':
      return h('span', { class: 'muted' }, 'node agent');
    case 'driver':
      return h(
        'span',
        { title: 'the job’s driver process and whatever it started (its process group)' },
        'driver of ',
        p.jobId ? jobLink(p.jobId) : '?',
      );
    case 'worker':
      return p.actorId
        ? h(
            'a',
            { href: `#/actors/${encodeURIComponent(p.actorId)}` },
            p.name ? `${p.name} (${p.className ?? '?'})` : (p.className ?? p.actorId),
          )
        : '–';
  }
}

/**
 * CPU (100% = one core) and resident memory of every process of the cluster, per node: the head,
 * job drivers, node agents and workers.
 */
function processesTable(nodes: NodeView[]): HTMLElement {
  const rows = nodes.flatMap((n) => n.processes.map((p) => ({ n, p })));
  const heading = h('h2', { id: 'processes-h' }, 'Processes');
  if (rows.length === 0)
    return h(
      'section',
      { 'aria-labelledby': 'processes-h' },
      heading,
      h('p', { class: 'muted' }, 'No usage sampled yet.'),
    );
  return h(
    'section',
    { 'aria-labelledby': 'processes-h' },
    heading,
    h(
      'div',
      { class: 'scroll' },
      h(
        'table',
        { class: 'processes' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            // What matters most first, so a narrow screen shows it without scrolling.
            h('th', {}, 'Actor'),
            h('th', { class: 'num', title: '100% = one core busy' }, 'CPU'),
            h('th', { class: 'num', title: 'Resident memory' }, 'Memory'),
            h('th', {}, 'PID'),
            h('th', {}, 'Job'),
            h('th', {}, 'Node'),
          ),
        ),
        h(
          'tbody',
          {},
          rows.map(({ n, p }) =>
            h(
              'tr',
              {
                'data-pid': p.pid,
                'data-kind': p.kind,
                ...(p.actorId ? { 'data-actor': p.actorId } : {}),
              },
              h('td', {}, processLabel(n, p)),
              h('td', { class: 'num cpu' }, cpuText(p.cpuPercent)),
              h('td', { class: 'num rss' }, rssText(p.rssBytes)),
              h('td', {}, p.pid),
              h('td', {}, p.jobId ? jobLink(p.jobId) : '–'),
              h('td', {}, h('code', {}, n.nodeId)),
            ),
          ),
        ),
      ),
    ),
  );
}

// ---- jobs ------------------------------------------------------------------------------------

/** The line of a failed job's message that says why (the last non-empty one). */
function failureReason(j: JobInfo): string {
  const line =
    j.message
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .at(-1) ?? '';
  return line.length > 140 ? `${line.slice(0, 140)}…` : line;
}

function progressCell(j: JobInfo): HTMLElement | string {
  const p = j.progress;
  if (!p || p.step === null) return '–';
  const text = p.totalSteps ? `${p.step} / ${p.totalSteps}` : `step ${p.step}`;
  const eta = j.status === 'RUNNING' && p.etaMs !== null ? ` · ETA ${duration(p.etaMs)}` : '';
  return h('span', { class: 'progress' }, text, h('span', { class: 'muted' }, eta));
}

function headlineCell(j: JobInfo): HTMLElement | string {
  const hl = j.progress?.headline;
  if (!hl || hl.last === null) return '–';
  const f = (x: number) =>
    hl.name.includes('accuracy') ? `${(x * 100).toFixed(1)}%` : x.toFixed(3);
  return h(
    'span',
    {},
    h('span', { class: 'muted' }, `${hl.name} `),
    hl.first !== null && hl.first !== hl.last ? `${f(hl.first)} → ${f(hl.last)}` : f(hl.last),
  );
}

function jobsTable(jobs: JobInfo[]): HTMLElement {
  if (jobs.length === 0)
    return h('p', { class: 'muted' }, 'No jobs yet. Submit one with rtjob submit -- train_ppo …');
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      { class: 'jobs' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'Job'),
          h('th', {}, 'Status'),
          h('th', {}, 'Progress'),
          h('th', {}, 'Headline'),
          h('th', {}, 'Entrypoint'),
          h('th', {}, 'Submitted'),
          h('th', {}, 'Duration'),
        ),
      ),
      h(
        'tbody',
        {},
        jobs.map((j) =>
          h(
            'tr',
            { 'data-job': j.jobId },
            h('td', {}, jobLink(j.jobId)),
            h(
              'td',
              {},
              badge(j.status),
              j.status === 'FAILED' && j.message
                ? h('div', { class: 'reason error', title: j.message }, failureReason(j))
                : null,
            ),
            h('td', {}, progressCell(j)),
            h('td', {}, headlineCell(j)),
            h('td', {}, h('code', {}, j.entrypoint.join(' '))),
            h('td', {}, time(j.submittedAt)),
            h('td', {}, jobDuration(j)),
          ),
        ),
      ),
    ),
  );
}

async function jobsView(): Promise<void> {
  const section = h('section', {});
  main.append(h('h1', {}, 'Jobs'), section);
  const load = async () => {
    const { jobs } = await api.call('GET /api/jobs');
    section.replaceChildren(jobsTable(jobs));
  };
  await load();
  refreshOn(['job'], load);
}

function maskEnv(k: string, v: string): string {
  return /TOKEN|SECRET|PASSWORD|KEY|CREDENTIAL/i.test(k) ? '••••••' : v;
}

/** Tabs of a job page; the hash `#/jobs/ID/TAB` opens one. */
const jobTabs = [
  ['charts', 'Charts'],
  ['samples', 'Samples'],
  ['logs', 'Logs'],
  ['config', 'Config'],
  ['actors', 'Actors'],
] as const;
type JobTab = (typeof jobTabs)[number][0];

async function jobView(jobId: string, tab: string | undefined): Promise<void> {
  const header = h('div', { class: 'job-header' });
  const summary = h('section', { 'aria-label': 'Summary', id: 'job-summary' });
  const config = h('section', { 'aria-label': 'Configuration' });
  const settings = h('div', { id: 'settings' });
  const onlyChanged = h('input', { type: 'checkbox', id: 'only-changed' }) as HTMLInputElement;
  const compareSel = h('select', { id: 'compare', 'aria-label': 'Compare with job' });
  const compareChips = h('span', { class: 'chips', id: 'compared' });
  const configDiff = h('div', { id: 'config-diff' });
  const xSel = h(
    'select',
    { id: 'x-axis', 'aria-label': 'x axis' },
    h('option', { value: 'step' }, 'x: step'),
    h('option', { value: 'wall' }, 'x: wall time'),
    h(
      'option',
      { value: 'tokens', title: `generated tokens so far (the ${tokensMetric} metric)` },
      'x: tokens',
    ),
  );
  const smoothing = h('input', {
    type: 'range',
    id: 'smoothing',
    min: 0,
    max: 0.95,
    step: 0.05,
    value: 0,
    'aria-label': 'Smoothing',
  });
  const smoothingOut = h('output', { for: 'smoothing' }, 'off');
  const chartsBox = h('div', { class: 'charts' });
  const samplesBox = h('div', {});
  const actorsBox = h('section', { 'aria-label': 'Actors' });
  const driverBox = h('div', {});
  const logPre = h('pre', {
    class: 'log',
    tabindex: 0,
    'aria-label': 'Driver log',
    'aria-live': 'off',
  });
  const follow = h('input', { type: 'checkbox', id: 'follow', checked: true });
  const current: JobTab = jobTabs.some(([t]) => t === tab) ? (tab as JobTab) : 'charts';
  const panels: Record<JobTab, HTMLElement> = {
    charts: h(
      'div',
      {},
      h(
        'div',
        { class: 'toolbar' },
        h('label', { for: 'compare' }, 'Compare with '),
        compareSel,
        compareChips,
        xSel,
        h('label', { for: 'smoothing' }, 'smoothing '),
        smoothing,
        smoothingOut,
        h('span', { class: 'muted' }, ' drag to zoom, double-click to reset, hover for values'),
      ),
      configDiff,
      chartsBox,
    ),
    samples: samplesBox,
    logs: h('div', {}, h('label', { class: 'small' }, follow, ' follow'), logPre),
    config: h(
      'div',
      {},
      h('h2', {}, 'Settings ', h('label', { class: 'small' }, onlyChanged, ' only changed')),
      settings,
      h('h2', {}, 'Job'),
      config,
    ),
    actors: h('div', {}, driverBox, h('h2', {}, 'Actors by role'), actorsBox),
  };
  const tabBar = h(
    'div',
    { role: 'tablist', class: 'tabs', 'aria-label': 'Job views' },
    jobTabs.map(([t, label]) =>
      h(
        'a',
        {
          role: 'tab',
          id: `tab-${t}`,
          href: `#/jobs/${encodeURIComponent(jobId)}/${t}`,
          'aria-selected': String(t === current),
          'aria-controls': `panel-${t}`,
        },
        label,
      ),
    ),
  );
  const charts = new MetricCharts(chartsBox);
  teardown.push(() => charts.destroy());
  const sections = jobTabs.map(([t]) =>
    h(
      'section',
      { role: 'tabpanel', id: `panel-${t}`, 'aria-labelledby': `tab-${t}`, hidden: t !== current },
      panels[t],
    ),
  );
  main.append(
    h('p', {}, h('a', { href: '#/jobs' }, '← Jobs')),
    header,
    summary,
    tabBar,
    ...sections,
  );
  jobPage = {
    jobId,
    show: (t) => {
      const want = jobTabs.some(([x]) => x === t) ? t : 'charts';
      jobTabs.forEach(([x], i) => {
        sections[i]!.hidden = x !== want;
        document.getElementById(`tab-${x}`)?.setAttribute('aria-selected', String(x === want));
      });
      // Charts laid out while hidden have no width yet.
      if (want === 'charts') charts.resize();
    },
  };

  const getJob = (id: string): Promise<JobInfo> =>
    api.call('GET /api/jobs/:jobId', { params: { jobId: id } });
  let job = await getJob(jobId);
  charts.setLayout(job.report?.charts);
  const renderSummary = () =>
    summary.replaceChildren(jobSummary(job, (name) => charts.ends(0, name)));
  const renderSettings = () =>
    settings.replaceChildren(configTable(job.report?.config ?? [], onlyChanged.checked));
  onlyChanged.addEventListener('change', renderSettings);
  const renderHeader = (j: JobInfo) => {
    const active = ['PENDING', 'RUNNING'].includes(j.status);
    const stop = h(
      'button',
      {
        class: 'danger',
        id: 'stop-job',
        disabled: !active || readOnly,
        title: readOnly ? readOnlyWhy : active ? '' : `the job is ${j.status}`,
      },
      'Stop job',
    );
    stop.addEventListener('click', async () => {
      if (
        !(await confirmAction(
          `Stop job ${j.jobId}? Its driver gets SIGTERM, then SIGKILL after a grace period; every actor it created is killed. The job ends STOPPED and cannot be resumed from here (train_ppo resumes from its last checkpoint with --load-checkpoint).`,
        ))
      )
        return;
      stop.setAttribute('disabled', '');
      await api
        .call('POST /api/jobs/:jobId/stop', { params: { jobId: j.jobId }, query: { wait: 0 } })
        .catch((e: Error) => toast(e.message));
    });
    header.replaceChildren(
      h('h1', {}, j.jobId, ' ', h('span', { id: 'job-status' }, badge(j.status)), ' ', stop),
      h(
        'p',
        {},
        h('code', {}, j.entrypoint.join(' ')),
        ` · submitted ${time(j.submittedAt)} · ran ${jobDuration(j)}`,
        j.exitCode !== null ? ` · exit code ${j.exitCode}` : '',
      ),
      j.message
        ? h(
            'pre',
            { class: j.status === 'FAILED' ? 'message error' : 'message', id: 'job-message' },
            j.message,
          )
        : '',
    );
    config.replaceChildren(
      h(
        'dl',
        {},
        h('dt', {}, 'Entrypoint'),
        h('dd', {}, h('code', {}, j.entrypoint.join(' '))),
        h('dt', {}, 'Working dir'),
        h('dd', {}, j.workingDir ?? j.metadata.cwd ?? '–'),
        h('dt', {}, 'Entrypoint resources'),
        h('dd', {}, `${j.entrypointNumCpus} CPU, ${j.entrypointNumGpus} GPU`),
        h('dt', {}, 'Env'),
        h(
          'dd',
          {},
          Object.keys(j.env).length
            ? h(
                'ul',
                { class: 'env' },
                Object.entries(j.env).map(([k, v]) =>
                  h('li', {}, h('code', {}, `${k}=${maskEnv(k, v)}`)),
                ),
              )
            : '–',
          j.inheritedEnvCount
            ? h(
                'p',
                { class: 'muted', id: 'env-rest' },
                `+ ${j.inheritedEnvCount} more inherited variable${j.inheritedEnvCount === 1 ? '' : 's'} (not shown)`,
              )
            : '',
        ),
      ),
    );
    renderSummary();
    renderSettings();
  };
  renderHeader(job);
  const reloadJob = async () => {
    job = await getJob(jobId);
    charts.setLayout(job.report?.charts);
    renderHeader(job);
  };
  refreshOn(['job'], reloadJob, (d) => (d as JobInfo).jobId === jobId, 200);

  // Charts, with incremental fetches on each metrics event.
  const compared: string[] = [];
  /** Per job, the smallest step that got rows after the charts read it (`metrics` events). */
  const stale = new Map<string, number>();
  const fetchInto = async (index: number, id: string) => {
    // The API pages long runs: the first read of a run comes downsampled by the server, later
    // reads are the new rows only, page by page (each appends to the charts), from the first
    // step that got rows late (a step's update metrics come after its episode metrics).
    const from = stale.get(id);
    stale.delete(id);
    for (let page = 0; page < 10_000; page++) {
      const last = charts.lastStep(index);
      const since = page === 0 && from !== undefined ? Math.min(last, from - 1) : last;
      const query = Number.isFinite(since) ? { sinceStep: since } : { maxPoints: 2000 };
      const t = await api.call('GET /api/jobs/:jobId/metrics', { params: { jobId: id }, query });
      if (t.rows.length > 0 || !Number.isFinite(since)) charts.append(index, t);
      if (t.nextSinceStep === null || t.rows.length === 0) return;
    }
  };
  const renderCompare = async () => {
    compareChips.replaceChildren(
      ...compared.map((id) => {
        const x = h('button', { class: 'small', 'aria-label': `stop comparing ${id}` }, `${id} ×`);
        x.addEventListener('click', () => {
          compared.splice(compared.indexOf(id), 1);
          void setJobs();
        });
        return x;
      }),
    );
    if (compared.length === 0) {
      configDiff.replaceChildren();
      return;
    }
    const others = await Promise.all(compared.map((id) => getJob(id)));
    configDiff.replaceChildren(h('h3', {}, 'Config diff'), diffTable([job, ...others]));
  };
  const setJobs = async () => {
    charts.setJobs([jobId, ...compared]);
    await fetchInto(0, jobId);
    for (const [i, id] of compared.entries()) await fetchInto(i + 1, id);
    await renderCompare();
  };
  await setJobs();
  // A job that logs no generated tokens has nothing to put on a tokens axis.
  const tokensOption = xSel.querySelector('option[value="tokens"]') as HTMLOptionElement;
  tokensOption.disabled = !charts.hasTokens(0);
  if (tokensOption.disabled) tokensOption.title = `this job logs no ${tokensMetric} metric`;
  renderSummary();
  const { jobs } = await api.call('GET /api/jobs');
  compareSel.append(
    h('option', { value: '' }, '(add a job)'),
    ...jobs
      .filter((j) => j.jobId !== jobId)
      .map((j) => h('option', { value: j.jobId }, `${j.jobId} (${j.status})`)),
  );
  compareSel.addEventListener('change', () => {
    const id = (compareSel as HTMLSelectElement).value;
    (compareSel as HTMLSelectElement).value = '';
    if (!id || compared.includes(id)) return;
    compared.push(id);
    void setJobs();
  });
  xSel.addEventListener('change', () =>
    charts.setXAxis((xSel as HTMLSelectElement).value as XAxis),
  );
  smoothing.addEventListener('input', () => {
    const a = Number((smoothing as HTMLInputElement).value);
    smoothingOut.textContent = a ? a.toFixed(2) : 'off';
    charts.setSmoothing(a);
  });
  const reloadSamples = samplesView(samplesBox, jobId);
  await reloadSamples();
  refreshOn(
    ['metrics'],
    async () => {
      await fetchInto(0, jobId);
      for (const [i, id] of compared.entries()) await fetchInto(i + 1, id);
      await reloadJob();
      await reloadSamples();
    },
    (d) => {
      const e = d as MetricsEvent;
      if (![jobId, ...compared].includes(e.jobId)) return false;
      if (e.fromStep !== undefined)
        stale.set(e.jobId, Math.min(stale.get(e.jobId) ?? Infinity, e.fromStep));
      return true;
    },
    500,
  );
  const onResize = () => charts.resize();
  addEventListener('resize', onResize);
  teardown.push(() => removeEventListener('resize', onResize));

  // Live log over the WebSocket tail; the server closes it when the job ends.
  const maxLogChars = 400_000;
  const ws = new WebSocket(
    `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${logTailPath(jobId)}`,
  );
  ws.onmessage = (e) => {
    let text = (logPre.textContent ?? '') + String(e.data);
    if (text.length > maxLogChars) text = '…\n' + text.slice(-maxLogChars);
    logPre.textContent = text;
    if ((follow as HTMLInputElement).checked) logPre.scrollTop = logPre.scrollHeight;
  };
  teardown.push(() => ws.close());

  // Actors of the job grouped by class (its role), each with what its worker uses now, under the
  // job's driver: a sync job's driver does real work too (it gathers episodes, builds batches).
  const loadActors = async () => {
    const [page, { nodes }] = await Promise.all([
      api.call('GET /api/jobs/:jobId/actors', {
        params: { jobId },
        query: { limit: 1000, sort: 'className', order: 'asc' },
      }),
      api.call('GET /api/nodes'),
    ]);
    const driver = nodes
      .flatMap((n) => n.processes)
      .find((p) => p.kind === 'driver' && p.jobId === jobId);
    driverBox.replaceChildren(
      ...(driver
        ? [
            h(
              'p',
              { id: 'job-driver' },
              h('strong', {}, 'Driver '),
              `${cpuText(driver.cpuPercent)} CPU, ${rssText(driver.rssBytes)} `,
              h('span', { class: 'muted' }, `(pid ${driver.pid}, with what it started)`),
            ),
          ]
        : []),
    );
    if (page.rows.length === 0) {
      actorsBox.replaceChildren(h('p', { class: 'muted' }, 'No actors.'));
      return;
    }
    const roles = new Map<string, ActorView[]>();
    for (const a of page.rows) roles.set(a.className, [...(roles.get(a.className) ?? []), a]);
    actorsBox.replaceChildren(
      ...[...roles].map(([role, list]) =>
        h('details', { open: true }, h('summary', {}, `${role} (${list.length})`), roleTable(list)),
      ),
    );
  };
  await loadActors();
  refreshOn(['cluster'], loadActors, () => true, 1000);
  // Node agents sample every 2 s and a sample raises no event: poll while the tab is shown.
  const usageTimer = setInterval(() => {
    if (jobPage?.jobId === jobId && !document.getElementById('panel-actors')?.hidden)
      void loadActors().catch(() => undefined);
  }, 2000);
  teardown.push(() => clearInterval(usageTimer));
}

/** A role's actors on the job page: state and the CPU and memory of each one's worker. */
function roleTable(list: ActorView[]): HTMLElement {
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      { class: 'role-actors' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          // What matters most first, so a narrow screen shows it without scrolling.
          h('th', {}, 'Actor'),
          h('th', {}, 'State'),
          h('th', { class: 'num', title: 'Its worker’s CPU; 100% = one core busy' }, 'CPU'),
          h('th', { class: 'num', title: 'Its worker’s resident memory' }, 'Memory'),
          h('th', {}, 'PID'),
          h('th', {}, 'Node'),
        ),
      ),
      h(
        'tbody',
        {},
        list.map((a) =>
          h(
            'tr',
            { 'data-actor': a.actorId },
            h(
              'td',
              {},
              h('a', { href: `#/actors/${encodeURIComponent(a.actorId)}` }, a.name ?? a.actorId),
            ),
            h('td', {}, badge(a.state)),
            h('td', { class: 'num cpu' }, cpuText(a.cpuPercent)),
            h('td', { class: 'num rss' }, rssText(a.rssBytes)),
            h('td', {}, a.pid ?? '–'),
            h('td', {}, a.nodeId ? h('code', {}, a.nodeId) : '–'),
          ),
        ),
      ),
    ),
  );
}

// ---- actors ----------------------------------------------------------------------------------

const actorColumns: [keyof ActorView, string][] = [
  ['actorId', 'Actor'],
  ['className', 'Class'],
  ['name', 'Name'],
  ['state', 'State'],
  ['nodeId', 'Node'],
  ['pid', 'PID'],
  ['jobId', 'Job'],
  ['restarts', 'Restarts'],
  ['startedAt', 'Uptime'],
];

async function actorsView(): Promise<void> {
  const q = { offset: 0, limit: 50, sort: 'startedAt', order: 'desc', state: '', q: '' };
  const search = h('input', {
    type: 'search',
    id: 'actor-q',
    placeholder: 'id, class or name',
    'aria-label': 'Filter actors',
  });
  const stateSel = h(
    'select',
    { id: 'actor-state', 'aria-label': 'State' },
    ...['', 'PENDING', 'ALIVE', 'RESTARTING', 'DEAD'].map((s) =>
      h('option', { value: s }, s || 'any state'),
    ),
  );
  const body = h('div', {});
  const pager = h('div', { class: 'pager' });
  main.append(h('h1', {}, 'Actors'), h('div', { class: 'toolbar' }, search, stateSel), body, pager);
  const load = async () => {
    const query: ActorPageQuery = {
      offset: q.offset,
      limit: q.limit,
      sort: q.sort as ActorPageQuery['sort'],
      order: q.order as 'asc' | 'desc',
    };
    if (q.state) query.state = q.state as ActorPageQuery['state'];
    if (q.q) query.q = q.q;
    const [page, running] = await Promise.all([
      api.call('GET /api/actors', { query }),
      runningJobs(),
    ]);
    const now = Date.now();
    const head = h(
      'tr',
      {},
      actorColumns.map(([key, label]) => {
        const sorted = q.sort === key;
        const btn = h(
          'button',
          { class: 'sort', 'data-sort': key },
          label,
          sorted ? (q.order === 'asc' ? ' ▲' : ' ▼') : '',
        );
        btn.addEventListener('click', () => {
          q.order = sorted && q.order === 'desc' ? 'asc' : 'desc';
          q.sort = key;
          void load();
        });
        return h(
          'th',
          { 'aria-sort': sorted ? (q.order === 'asc' ? 'ascending' : 'descending') : 'none' },
          btn,
        );
      }),
      h('th', {}, 'Death cause'),
      h('th', {}, h('span', { class: 'sr-only' }, 'Actions')),
    );
    body.replaceChildren(
      h(
        'div',
        { class: 'scroll' },
        h(
          'table',
          { class: 'actors' },
          h('thead', {}, head),
          h(
            'tbody',
            {},
            page.rows.map((a) =>
              h(
                'tr',
                { 'data-actor': a.actorId },
                h(
                  'td',
                  {},
                  h(
                    'a',
                    { href: `#/actors/${encodeURIComponent(a.actorId)}` },
                    h('code', {}, a.actorId),
                  ),
                ),
                h('td', {}, a.className),
                h('td', {}, a.name ?? ''),
                h('td', {}, badge(a.state)),
                h('td', {}, a.nodeId ?? ''),
                h('td', {}, a.pid ?? ''),
                h('td', {}, a.jobId ? jobLink(a.jobId) : ''),
                h('td', {}, a.restarts),
                h('td', {}, a.startedAt && a.state !== 'DEAD' ? duration(now - a.startedAt) : '–'),
                h('td', { class: 'cause' }, a.deathCause ?? ''),
                h('td', {}, actorActions(a, load, running)),
              ),
            ),
          ),
        ),
      ),
    );
    const last = Math.min(page.offset + page.limit, page.total);
    const prev = h('button', { disabled: page.offset === 0 }, '← Previous');
    const next = h('button', { disabled: last >= page.total }, 'Next →');
    prev.addEventListener('click', () => {
      q.offset = Math.max(0, q.offset - q.limit);
      void load();
    });
    next.addEventListener('click', () => {
      q.offset += q.limit;
      void load();
    });
    pager.replaceChildren(
      prev,
      h(
        'span',
        { id: 'actor-range' },
        ` ${page.total ? page.offset + 1 : 0}–${last} of ${page.total} `,
      ),
      next,
    );
  };
  let typing: ReturnType<typeof setTimeout> | undefined;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      q.q = (search as HTMLInputElement).value;
      q.offset = 0;
      void load();
    }, 200);
  });
  stateSel.addEventListener('change', () => {
    q.state = (stateSel as HTMLSelectElement).value;
    q.offset = 0;
    void load();
  });
  await load();
  refreshOn(['cluster'], load, () => true, 1000);
}

/** train_ppo's roles, and what losing one does to its running job. */
const roleFate: Record<string, string> = {
  Rollout:
    'train_ppo restarts a rollout that dies (up to 3 times) and re-runs its in-flight groups, so the job goes on',
  Trainer:
    'train_ppo cannot go on without its trainer: the job fails (resume it from its last checkpoint with --load-checkpoint)',
  Reference: 'train_ppo cannot go on without its reference model: the job fails',
  Critic:
    'train_ppo cannot go on without its critic: the job fails (resume it from its last checkpoint with --load-checkpoint)',
};

/** What killing or restarting `a` does to the job it belongs to, when that job is running. */
function jobConsequence(a: ActorView, running: ReadonlyMap<string, JobInfo>): string {
  const job = a.jobId ? running.get(a.jobId) : undefined;
  if (!job) return '';
  const trainPpo = job.entrypoint[0] === 'train_ppo';
  const fate =
    (trainPpo ? roleFate[a.className] : undefined) ??
    "whether the job goes on depends on its driver handling the actor's death";
  return ` It is the ${a.className} of running job ${a.jobId}: calls in flight to it fail; ${fate}.`;
}

/** Why Restart cannot work for `a`, or undefined when it can. */
function restartBlocked(a: ActorView): string | undefined {
  if (readOnly) return readOnlyWhy;
  if (a.state === 'DEAD') return 'the actor is dead';
  if (a.maxRestarts === undefined) return undefined;
  if (a.maxRestarts === 0)
    return 'it allows no restarts (maxRestarts 0): a restart would kill it for good';
  if (a.maxRestarts > 0 && a.restarts >= a.maxRestarts)
    return `it has used all ${a.maxRestarts} of its restarts: a restart would kill it for good`;
  return undefined;
}

function actorActions(
  a: ActorView,
  after: () => Promise<void>,
  running: ReadonlyMap<string, JobInfo> = new Map(),
): HTMLElement {
  const name = `${a.name ?? a.actorId} (${a.className})`;
  const kill = h(
    'button',
    {
      class: 'danger small',
      disabled: a.state === 'DEAD' || readOnly,
      title: readOnly ? readOnlyWhy : '',
    },
    'Kill',
  );
  kill.addEventListener('click', async () => {
    if (
      !(await confirmAction(
        `Kill ${name}? Its process is killed and it is not restarted.${jobConsequence(a, running)}`,
      ))
    )
      return;
    await api
      .call('POST /api/actors/:actorId/kill', {
        params: { actorId: a.actorId },
        body: { noRestart: true },
      })
      .catch((e: Error) => toast(e.message));
    await after();
  });
  const blocked = restartBlocked(a);
  const restart = h(
    'button',
    {
      class: 'small',
      disabled: blocked !== undefined,
      title: blocked ? `Restart is off: ${blocked}` : '',
    },
    'Restart',
  );
  restart.addEventListener('click', async () => {
    const left =
      a.maxRestarts === undefined || a.maxRestarts < 0
        ? ''
        : ` (restart ${a.restarts + 1} of the ${a.maxRestarts} it allows)`;
    const text = `Restart ${name}? Its process is killed and the runtime starts a new one${left}: its constructor runs again and its in-memory state is lost.${jobConsequence(a, running)}`;
    if (!(await confirmAction(text))) return;
    await api
      .call('POST /api/actors/:actorId/restart', { params: { actorId: a.actorId } })
      .catch((e: Error) => toast(e.message));
    await after();
  });
  return h(
    'span',
    { class: 'actions' },
    kill,
    ' ',
    restart,
    blocked && a.state !== 'DEAD' ? h('span', { class: 'muted small why' }, ` ${blocked}`) : null,
  );
}

/** The running jobs by id (for what a kill or restart does to them). */
async function runningJobs(): Promise<Map<string, JobInfo>> {
  const { jobs } = await api.call('GET /api/jobs', { query: { limit: 200 } });
  return new Map(jobs.filter((j) => j.status === 'RUNNING').map((j) => [j.jobId, j]));
}

async function actorView(actorId: string): Promise<void> {
  const info = h('section', {});
  const logPre = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'Actor log' });
  main.append(
    h('p', {}, h('a', { href: '#/actors' }, '← Actors')),
    info,
    h('h2', {}, 'Logs'),
    logPre,
  );
  const load = async () => {
    const [a, running] = await Promise.all([
      api.call('GET /api/actors/:actorId', { params: { actorId } }),
      runningJobs(),
    ]);
    info.replaceChildren(
      h('h1', {}, a.name ?? a.actorId, ' ', badge(a.state)),
      h(
        'dl',
        {},
        h('dt', {}, 'Id'),
        h('dd', {}, h('code', {}, a.actorId)),
        h('dt', {}, 'Class'),
        h('dd', {}, a.className),
        h('dt', {}, 'Job'),
        h('dd', {}, a.jobId ? jobLink(a.jobId) : '–'),
        h('dt', {}, 'Node / PID'),
        h('dd', {}, `${a.nodeId ?? '–'} / ${a.pid ?? '–'}`),
        h('dt', {}, 'Restarts'),
        h('dd', {}, a.restarts),
        h('dt', {}, 'Started'),
        h('dd', {}, time(a.startedAt)),
        h('dt', {}, 'Death cause'),
        h('dd', {}, a.deathCause ?? '–'),
      ),
      actorActions(a, load, running),
    );
  };
  await load();
  // The cursor holds one offset per log file (stdout and stderr of every incarnation).
  let cursor = '';
  const maxLogChars = 400_000;
  const poll = async () => {
    const r = await api.call('GET /api/actors/:actorId/logs', {
      params: { actorId },
      query: { cursor },
    });
    if (r.logs) {
      let text = (logPre.textContent ?? '') + r.logs;
      if (text.length > maxLogChars) text = '…\n' + text.slice(-maxLogChars);
      logPre.textContent = text;
      logPre.scrollTop = logPre.scrollHeight;
    }
    cursor = r.cursor;
  };
  await poll();
  const timer = setInterval(() => void poll().catch(() => undefined), 1000);
  teardown.push(() => clearInterval(timer));
  refreshOn(['cluster'], load, () => true, 1000);
}

const live = document.getElementById('live') as HTMLElement;
connectLive((ok) => {
  if (readOnly) return;
  live.textContent = ok ? '● live' : '○ reconnecting…';
  live.dataset.ok = String(ok);
});
addEventListener('hashchange', route);
void api
  .call('GET /api/version')
  .then((v) => {
    readOnly = v.readOnly !== null;
    if (v.readOnly) {
      live.textContent = 'read-only';
      document
        .querySelector('header')
        ?.after(
          h(
            'p',
            { class: 'banner', id: 'read-only' },
            `Finished session ${v.readOnly.sessionDir}, served read-only: no cluster is running, so nothing can be stopped or restarted.`,
          ),
        );
    }
  })
  .catch(() => undefined)
  .finally(route);
