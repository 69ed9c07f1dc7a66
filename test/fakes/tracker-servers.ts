/**
 * Fakes of the two tracker services rtjob talks to, each serving the routes its clients use, with
 * the checks the real service makes:
 *
 * - W&B: `POST /graphql` (`viewer`; the `upsertBucket` mutation, whose `config` must be a JSON
 *   string) behind HTTP Basic `api:<key>`, and `POST /files/<entity>/<project>/<run>/file_stream`,
 *   which appends `wandb-history.jsonl` lines at their offset (a gap is refused), replaces
 *   `wandb-summary.json` and takes `{complete, exitcode}`.
 * - MLflow: `GET experiments/get-by-name` (404 `RESOURCE_DOES_NOT_EXIST` when absent),
 *   `experiments/create`, `runs/create`, `runs/log-batch` (the documented limits: 1000 metrics,
 *   100 params, 1000 items; 400 `INVALID_PARAMETER_VALUE` beyond them; a param may not change
 *   value), `runs/update`.
 *
 * Both can be taken down (`down = true`: every request is refused with 503) and brought back.
 *
 * @module
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

interface Fake {
  url: string;
  /** Answer every request with 503 while set. */
  down: boolean;
  requests: number;
  close(): Promise<void>;
}

async function listen(
  handle: (req: IncomingMessage, body: string, res: ServerResponse) => void,
): Promise<{ server: Server; url: string; fake: { down: boolean; requests: number } }> {
  const fake = { down: false, requests: 0 };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      fake.requests++;
      if (fake.down) {
        res.writeHead(503).end('down');
        return;
      }
      handle(req, body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { server, url, fake };
}

const json = (res: ServerResponse, status: number, v: unknown): void => {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
};

const closer = (server: Server) => () =>
  new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  });

/** One W&B run as the fake holds it. */
export interface FakeWandbRun {
  entity: string;
  project: string;
  name: string;
  displayName?: string;
  groupName?: string;
  config: Record<string, { value: unknown }>;
  history: Record<string, unknown>[];
  summary: Record<string, unknown>;
  exitcode?: number;
}

/** The fake W&B service. */
export interface FakeWandb extends Fake {
  runs: Map<string, FakeWandbRun>;
}

/** Starts a fake W&B service that accepts `apiKey`, whose default entity is `entity`. */
export async function startFakeWandb(apiKey: string, entity = 'tester'): Promise<FakeWandb> {
  const runs = new Map<string, FakeWandbRun>();
  const authorized = (req: IncomingMessage) =>
    req.headers.authorization === `Basic ${Buffer.from(`api:${apiKey}`).toString('base64')}`;
  const { server, url, fake } = await listen((req, body, res) => {
    if (!authorized(req)) return json(res, 401, { errors: [{ message: 'user is not logged in' }] });
    if (req.method === 'POST' && req.url === '/graphql') {
      const { query, variables: v } = JSON.parse(body) as {
        query: string;
        variables: Record<string, unknown>;
      };
      if (/^\s*query\s+Viewer\b/.test(query))
        return json(res, 200, { data: { viewer: { entity } } });
      if (/^\s*mutation\s+\w*\s*\([^)]*\)\s*\{\s*upsertBucket\s*\(/.test(query)) {
        if (typeof v.config !== 'string')
          return json(res, 200, { errors: [{ message: 'config must be a JSONString' }] });
        const key = `${String(v.entity)}/${String(v.project)}/${String(v.name)}`;
        const run: FakeWandbRun = {
          entity: String(v.entity),
          project: String(v.project),
          name: String(v.name),
          ...(typeof v.displayName === 'string' ? { displayName: v.displayName } : {}),
          ...(typeof v.groupName === 'string' ? { groupName: v.groupName } : {}),
          config: JSON.parse(v.config) as FakeWandbRun['config'],
          history: [],
          summary: {},
        };
        runs.set(key, run);
        return json(res, 200, {
          data: {
            upsertBucket: {
              bucket: {
                id: key,
                name: run.name,
                displayName: run.displayName,
                project: { name: run.project, entity: { name: run.entity } },
              },
              inserted: true,
            },
          },
        });
      }
      return json(res, 200, { errors: [{ message: 'unknown operation' }] });
    }
    const m = /^\/files\/([^/]+)\/([^/]+)\/([^/]+)\/file_stream$/.exec(req.url ?? '');
    if (req.method === 'POST' && m) {
      const run = runs.get(`${m[1]}/${m[2]}/${m[3]}`);
      if (!run) return json(res, 404, { error: 'run not found' });
      const b = JSON.parse(body) as {
        files?: Record<string, { offset: number; content: string[] }>;
        complete?: boolean;
        exitcode?: number;
      };
      const h = b.files?.['wandb-history.jsonl'];
      if (h) {
        if (h.offset > run.history.length)
          return json(res, 400, { error: `offset ${h.offset} past ${run.history.length} lines` });
        run.history.splice(h.offset, h.content.length, ...h.content.map((l) => JSON.parse(l)));
      }
      const s = b.files?.['wandb-summary.json'];
      if (s) run.summary = JSON.parse(s.content.at(-1) ?? '{}') as Record<string, unknown>;
      if (b.complete) run.exitcode = b.exitcode ?? 0;
      return json(res, 200, { exitcode: null, limits: {} });
    }
    json(res, 404, { error: 'no route' });
  });
  return {
    url,
    runs,
    get down() {
      return fake.down;
    },
    set down(v: boolean) {
      fake.down = v;
    },
    get requests() {
      return fake.requests;
    },
    close: closer(server),
  };
}

/** One MLflow run as the fake holds it. */
export interface FakeMlflowRun {
  experimentId: string;
  runName: string;
  tags: Record<string, string>;
  params: Record<string, string>;
  metrics: { key: string; value: number; timestamp: number; step: number }[];
  status: string;
  endTime?: number;
}

/** The fake MLflow tracking server. */
export interface FakeMlflow extends Fake {
  experiments: Map<string, string>;
  runs: Map<string, FakeMlflowRun>;
  /** Largest `runs/log-batch` seen, in metrics. */
  largestBatch: number;
}

/** Starts a fake MLflow tracking server; `token`, when given, is required as a bearer token. */
export async function startFakeMlflow(token?: string): Promise<FakeMlflow> {
  const experiments = new Map<string, string>([['Default', '0']]);
  const runs = new Map<string, FakeMlflowRun>();
  let largestBatch = 0;
  let nextRun = 0;
  const bad = (res: ServerResponse, message: string) =>
    json(res, 400, { error_code: 'INVALID_PARAMETER_VALUE', message });
  const { server, url, fake } = await listen((req, body, res) => {
    if (token && req.headers.authorization !== `Bearer ${token}`)
      return json(res, 401, { error_code: 'UNAUTHENTICATED', message: 'bad token' });
    const u = new URL(req.url ?? '/', 'http://x');
    const route = u.pathname.replace(/^\/api\/2\.0\/mlflow\//, '');
    const b = (body ? JSON.parse(body) : {}) as Record<string, unknown>;
    if (req.method === 'GET' && route === 'experiments/get-by-name') {
      const id = experiments.get(u.searchParams.get('experiment_name') ?? '');
      if (id === undefined)
        return json(res, 404, {
          error_code: 'RESOURCE_DOES_NOT_EXIST',
          message: 'no such experiment',
        });
      return json(res, 200, {
        experiment: { experiment_id: id, name: u.searchParams.get('experiment_name') },
      });
    }
    if (req.method !== 'POST') return json(res, 405, { error_code: 'BAD_REQUEST' });
    if (route === 'experiments/create') {
      const name = String(b.name);
      if (experiments.has(name))
        return json(res, 400, { error_code: 'RESOURCE_ALREADY_EXISTS', message: name });
      experiments.set(name, String(experiments.size + 100));
      return json(res, 200, { experiment_id: experiments.get(name) });
    }
    if (route === 'runs/create') {
      const id = `run${nextRun++}`;
      const tags = Object.fromEntries(
        ((b.tags as { key: string; value: string }[]) ?? []).map((t) => [t.key, t.value]),
      );
      runs.set(id, {
        experimentId: String(b.experiment_id),
        runName: String(b.run_name),
        tags,
        params: {},
        metrics: [],
        status: 'RUNNING',
      });
      return json(res, 200, { run: { info: { run_id: id, run_uuid: id, status: 'RUNNING' } } });
    }
    const run = runs.get(String(b.run_id));
    if (!run) return json(res, 404, { error_code: 'RESOURCE_DOES_NOT_EXIST', message: 'run' });
    if (route === 'runs/log-batch') {
      const metrics = (b.metrics as FakeMlflowRun['metrics']) ?? [];
      const params = (b.params as { key: string; value: string }[]) ?? [];
      if (metrics.length > 1000) return bad(res, `at most 1000 metrics, got ${metrics.length}`);
      if (params.length > 100) return bad(res, `at most 100 params, got ${params.length}`);
      for (const m of metrics)
        if (
          typeof m.value !== 'number' ||
          !Number.isInteger(m.step) ||
          !Number.isInteger(m.timestamp)
        )
          return bad(res, `bad metric ${JSON.stringify(m)}`);
      for (const p of params) {
        if (run.params[p.key] !== undefined && run.params[p.key] !== p.value)
          return bad(res, `param ${p.key} changed`);
        run.params[p.key] = p.value;
      }
      largestBatch = Math.max(largestBatch, metrics.length);
      run.metrics.push(...metrics);
      return json(res, 200, {});
    }
    if (route === 'runs/update') {
      run.status = String(b.status);
      run.endTime = Number(b.end_time);
      return json(res, 200, { run_info: { status: run.status } });
    }
    json(res, 404, { error_code: 'ENDPOINT_NOT_FOUND' });
  });
  return {
    url,
    experiments,
    runs,
    get largestBatch() {
      return largestBatch;
    },
    get down() {
      return fake.down;
    },
    set down(v: boolean) {
      fake.down = v;
    },
    get requests() {
      return fake.requests;
    },
    close: closer(server),
  };
}
