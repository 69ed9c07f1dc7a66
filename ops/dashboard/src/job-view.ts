/**
 * A job's page: header and summary, then tabs for its charts (with compare), samples, logs,
 * config and actors, all following the job live.
 *
 * @module
 */
import { type ActorView, api, type JobInfo, logTailPath, type MetricsEvent } from './api.ts';
import { MetricCharts, type XAxis } from './charts.ts';
import { configTable, diffTable, jobSummary, percentMetrics } from './job-summary.ts';
import { samplesView } from './samples-view.ts';
import { verdictView } from './verdict-view.ts';
import { actorName } from './actors-view.ts';
import { cpuText, rssText } from './cluster-view.ts';
import { failureReason, resumeAdvice, stopAdvice } from '../../../runtime/format.ts';
import { badge, confirmAction, h, time, toast } from './dom.ts';
import { main, page, readOnlyWhy, refreshOn, jobDuration } from './page.ts';

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

export async function jobView(jobId: string, tab: string | undefined): Promise<void> {
  const header = h('div', { class: 'job-header' });
  const summary = h('section', { 'aria-label': 'Summary', id: 'job-summary' });
  const verdict = h('section', { 'aria-label': 'What limits the run', id: 'job-verdict' });
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
      { value: 'tokens', title: 'generated tokens so far (the metric the job names for it)' },
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
  page.teardown.push(() => charts.destroy());
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
    verdict,
    tabBar,
    ...sections,
  );
  page.jobPage = {
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
  charts.setLayout(job.report?.charts, percentMetrics(job));
  const renderSummary = () =>
    summary.replaceChildren(jobSummary(job, (name) => charts.ends(0, name)));
  const renderSettings = () =>
    settings.replaceChildren(configTable(job.report?.config ?? [], onlyChanged.checked));
  onlyChanged.addEventListener('change', renderSettings);
  const renderHeader = (j: JobInfo) => {
    const active = ['PENDING', 'RUNNING'].includes(j.status);
    charts.setJobState({
      live: active,
      ...(j.status === 'FAILED'
        ? {
            failure: {
              reason: failureReason(j.message) || `exit code ${j.exitCode ?? '?'}`,
              logsHref: `#/jobs/${encodeURIComponent(j.jobId)}/logs`,
            },
          }
        : {}),
    });
    // Only a job that can still be stopped gets the button.
    const stop = h(
      'button',
      {
        class: 'danger',
        id: 'stop-job',
        disabled: page.readOnly,
        title: page.readOnly ? readOnlyWhy : '',
      },
      'Stop job',
    );
    stop.addEventListener('click', async () => {
      // What it leaves to resume from, read now: a checkpoint may have been written since.
      const now = await getJob(j.jobId).catch(() => j);
      const left =
        now.report?.checkpoint || now.progress?.step
          ? `; ${resumeAdvice(now.report?.checkpoint, now.progress?.step ?? null)}`
          : '';
      if (
        !(await confirmAction(
          `Stop job ${j.jobId}? Its driver gets SIGTERM, then SIGKILL after a grace period; every actor it created is killed. The job ends STOPPED and cannot be resumed from here${left}.`,
        ))
      )
        return;
      stop.setAttribute('disabled', '');
      await api
        .call('POST /api/jobs/:jobId/stop', { params: { jobId: j.jobId }, query: { wait: 0 } })
        .catch((e: Error) => toast(e.message));
    });
    header.replaceChildren(
      h(
        'h1',
        {},
        j.jobId,
        ' ',
        h('span', { id: 'job-status' }, badge(j.status)),
        ...(active ? [' ', stop] : []),
      ),
      h(
        'p',
        {},
        h('code', {}, j.entrypoint.join(' ')),
        ` · submitted ${time(j.submittedAt)} · ran ${jobDuration(j)}`,
        j.exitCode !== null ? ` · exit code ${j.exitCode}` : '',
      ),
      // A stopped run: the step it saved and the exact command that resumes from it.
      j.status === 'STOPPED' && stopAdvice(j).length
        ? h(
            'p',
            { id: 'job-resume' },
            ...stopAdvice(j).flatMap((line, i): (string | HTMLElement)[] =>
              i === 0 ? [line] : [h('br', {}), h('code', {}, line)],
            ),
          )
        : '',
      // A failure's own line first (the error, not the top of the log), then the last output.
      j.status === 'FAILED' && j.message
        ? h('p', { class: 'error failure', id: 'job-reason' }, failureReason(j.message))
        : '',
      j.message
        ? h(
            'pre',
            { class: j.status === 'FAILED' ? 'message error' : 'message', id: 'job-message' },
            j.message,
          )
        : '',
    );
    // The log's end is nearest the failure: show it, not its top.
    const pre = header.querySelector('#job-message');
    if (pre && j.status === 'FAILED') pre.scrollTop = pre.scrollHeight;
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
  // What `rtjob diagnose` says, judged by the head from the stored metrics (`ops/diagnose.ts`).
  const renderVerdict = async () => {
    const d = await api.call('GET /api/jobs/:jobId/diagnosis', { params: { jobId } });
    verdict.replaceChildren(...('reason' in d ? [] : [verdictView(d)]));
  };
  const reloadJob = async () => {
    job = await getJob(jobId);
    charts.setLayout(job.report?.charts, percentMetrics(job));
    renderHeader(job);
    await renderVerdict();
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
  // A job that logs no generated tokens has nothing to put on a tokens axis; a live job opened
  // before its first step gets the axis once the metric arrives.
  const tokensOption = xSel.querySelector('option[value="tokens"]') as HTMLOptionElement;
  const updateTokensOption = () => {
    tokensOption.disabled = !charts.hasTokens(0);
    tokensOption.title = charts.tokensMetric
      ? `generated tokens so far (the ${charts.tokensMetric} metric)`
      : 'this job names no metric of generated tokens';
    if (tokensOption.disabled && charts.tokensMetric)
      tokensOption.title = `this job logs no ${charts.tokensMetric} metric`;
  };
  updateTokensOption();
  renderSummary();
  await renderVerdict();
  const { jobs } = await api.call('GET /api/jobs');
  compareSel.append(
    h('option', { value: '' }, '(add a job)'),
    // Only jobs with metrics: a job that logged none has nothing to draw beside this one.
    ...jobs
      .filter((j) => j.jobId !== jobId && (j.progress?.step ?? null) !== null)
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
  const reloadSamples = samplesView(samplesBox, jobId, job.report?.samples?.score ?? 'score');
  await reloadSamples();
  refreshOn(
    ['metrics'],
    async () => {
      await fetchInto(0, jobId);
      for (const [i, id] of compared.entries()) await fetchInto(i + 1, id);
      updateTokensOption();
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
  page.teardown.push(() => removeEventListener('resize', onResize));

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
  page.teardown.push(() => ws.close());

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
    if (page.jobPage?.jobId === jobId && !document.getElementById('panel-actors')?.hidden)
      void loadActors().catch(() => undefined);
  }, 2000);
  page.teardown.push(() => clearInterval(usageTimer));
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
              h(
                'a',
                { href: `#/actors/${encodeURIComponent(a.actorId)}` },
                actorName(a) ?? a.actorId,
              ),
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
