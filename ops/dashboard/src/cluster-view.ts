/**
 * The Cluster view: nodes with their resources, and every process of the cluster (head, node
 * agents, job drivers, actors) with its sampled CPU and memory.
 *
 * @module
 */
import { api, type NodeView, type ProcessView } from './api.ts';
import { bytes } from '../../../runtime/format.ts';
import { badge, bar, h } from './dom.ts';
import { jobsTable } from './jobs-view.ts';
import { main, page, refreshOn, jobLink } from './page.ts';

export async function clusterView(): Promise<void> {
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
  page.teardown.push(() => clearInterval(timer));
}

/** A process's sampled CPU (100% = one core), or a dash before its second sample. */
export function cpuText(x: number | null): string {
  return x === null ? '–' : `${x.toFixed(1)}%`;
}

/** A process's sampled resident memory, or a dash where it is not known. */
export function rssText(x: number | null): string {
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
