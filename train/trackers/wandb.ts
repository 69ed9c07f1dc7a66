/**
 * `--use-wandb`: a Weights & Biases run, over the two HTTP routes W&B's own clients use (its
 * Python SDK and its JavaScript SDK `@wandb/sdk` alike): the GraphQL endpoint `POST /graphql`
 * (`viewer` for the default entity, the `upsertBucket` mutation that creates the run with its
 * config) and the run's file stream `POST /files/<entity>/<project>/<run id>/file_stream`, which
 * appends history rows (`wandb-history.jsonl` at an offset), replaces the summary
 * (`wandb-summary.json`) and finally marks the run complete with its exit code.
 *
 * W&B documents its SDKs, not these routes; they are what the SDKs send (rtjob does not use
 * `@wandb/sdk` itself: it was last released in 2024, and its worker throws out of event
 * handlers when the service fails, which would end a training run). Authentication is HTTP
 * Basic with user `api` and the API key, as the SDKs send it. Like the SDK, the run also keeps a
 * local copy (`wandb/run-<time>-<id>/`, written by `wandb-offline.ts`), so rows the service never
 * took can still be uploaded with `wandb sync`.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import {
  Outbox,
  type Row,
  type RunSetting,
  type Tracker,
  type TrackerRun,
  TrackerError,
  requestJson,
} from './tracker.ts';
import { type WandbRunDir, writeWandbRun } from './wandb-offline.ts';
import { finiteValues, wandbConfig, wandbHistoryRow, wandbRunId } from './wandb-run.ts';

/** Where and as whom a W&B run is made. */
export interface WandbTarget {
  /** API key (`--use-wandb KEY`, else `WANDB_API_KEY`, else `~/.netrc`). */
  apiKey: string;
  /** @default WANDB_BASE_URL, else https://api.wandb.ai */
  baseUrl: string;
  /** The entity (user or team); `--wandb-org`, else `WANDB_ENTITY`, else the key's default. */
  entity?: string;
  project: string;
  group?: string;
  /** @default 2000 */
  flushIntervalMs?: number;
  /**
   * Where the run's local copy goes (`<localRoot>/wandb/run-<time>-<id>/`, as the SDK keeps one),
   * so rows the service never took can be uploaded later with `wandb sync`. Left out, none.
   */
  localRoot?: string;
}

/**
 * The API key `--use-wandb` names: its value, else `WANDB_API_KEY`, else the host's `~/.netrc`
 * entry; `undefined` when there is none.
 */
export function wandbApiKey(
  flag: string,
  baseUrl: string,
  env: Readonly<Record<string, string | undefined>>,
  netrcPath = join(env.HOME ?? homedir(), '.netrc'),
): string | undefined {
  if (flag !== 'true') return flag;
  if (env.WANDB_API_KEY) return env.WANDB_API_KEY;
  const host = new URL(baseUrl).hostname;
  try {
    const words = readFileSync(netrcPath, 'utf8').split(/\s+/);
    for (let i = 0; i < words.length; i++) {
      if (words[i] !== 'machine' || words[i + 1] !== host) continue;
      for (let j = i + 2; j < words.length && words[j] !== 'machine'; j++)
        if (words[j] === 'password' && words[j + 1]) return words[j + 1]!;
    }
  } catch {
    // No ~/.netrc: no key.
  }
  return undefined;
}

/** How to give a key, for the host of `baseUrl`. */
export function wandbKeyHint(baseUrl: string): string {
  return `give --use-wandb KEY, set WANDB_API_KEY, or run \`wandb login\` for ${new URL(baseUrl).hostname}`;
}

const upsertBucket = `mutation UpsertBucket($name: String, $project: String, $entity: String, $groupName: String, $displayName: String, $config: JSONString, $host: String, $program: String, $jobType: String) {
  upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, groupName: $groupName, displayName: $displayName, config: $config, host: $host, jobProgram: $program, jobType: $jobType}) {
    bucket { id name displayName project { name entity { name } } }
    inserted
  }
}`;

interface GraphQlAnswer<T> {
  data?: T;
  errors?: { message: string }[];
}

/** W&B's config form on its GraphQL route: `{ name: { value, desc } }`. */
function upsertConfig(settings: readonly RunSetting[]): string {
  const c: Record<string, { value: unknown; desc: null }> = {};
  for (const [k, value] of Object.entries(wandbConfig(settings))) c[k] = { value, desc: null };
  return JSON.stringify(c);
}

/** The SDK's local copy of an online run, under the run's id (none without `localRoot`). */
function localCopy(
  t: WandbTarget,
  run: TrackerRun,
  id: string,
  startedMs: number,
): WandbRunDir | undefined {
  if (t.localRoot === undefined) return undefined;
  const target = {
    root: t.localRoot,
    project: t.project,
    ...(t.entity ? { entity: t.entity } : {}),
    ...(t.group ? { group: t.group } : {}),
  };
  return writeWandbRun(target, run, { id, startedMs, mode: 'run' });
}

/** Opens a W&B run; it is created in the background, and a service that is away only warns. */
export function openWandb(t: WandbTarget, run: TrackerRun): Tracker {
  const warn = run.warn ?? ((l: string) => process.stderr.write(`${l}\n`));
  const base = t.baseUrl.replace(/\/+$/, '');
  const headers = { authorization: `Basic ${Buffer.from(`api:${t.apiKey}`).toString('base64')}` };
  const id = wandbRunId();
  const started = Date.now();
  const local = localCopy(t, run, id, started);
  let entity = t.entity;
  let project = t.project;
  let offset = 0;
  const summary: Record<string, number> = {};
  let url: string | undefined;

  const graphql = async <T>(query: string, variables: Record<string, unknown>): Promise<T> => {
    const a = await requestJson<GraphQlAnswer<T>>('wandb', `${base}/graphql`, {
      headers,
      body: { query, variables },
    });
    if (a.errors?.length || !a.data)
      throw new TrackerError('wandb', `GraphQL: ${a.errors?.[0]?.message ?? 'no data'}`);
    return a.data;
  };
  const fileStream = (body: unknown) =>
    requestJson('wandb', `${base}/files/${entity}/${project}/${id}/file_stream`, { headers, body });

  const outbox = new Outbox({
    kind: 'wandb',
    warn,
    ...(local
      ? { lostHint: `its local copy has every row: wandb sync ${local.dir} uploads them` }
      : {}),
    ...(t.flushIntervalMs !== undefined ? { flushIntervalMs: t.flushIntervalMs } : {}),
    async start() {
      if (!entity) {
        const v = await graphql<{ viewer?: { entity?: string } }>(
          'query Viewer { viewer { entity } }',
          {},
        );
        entity = v.viewer?.entity;
        if (!entity)
          throw new TrackerError('wandb', 'the API key names no default entity; pass --wandb-org');
      }
      const d = await graphql<{
        upsertBucket?: {
          bucket?: { name: string; project?: { name: string; entity?: { name: string } } };
        };
      }>(upsertBucket, {
        name: id,
        project,
        entity,
        ...(t.group ? { groupName: t.group } : {}),
        displayName: run.name,
        config: upsertConfig(run.settings),
        host: hostname(),
        program: run.program,
        jobType: run.program,
      });
      const b = d.upsertBucket?.bucket;
      if (!b) throw new TrackerError('wandb', 'upsertBucket returned no run');
      project = b.project?.name ?? project;
      entity = b.project?.entity?.name ?? entity;
      url = `${base.replace('//api.', '//')}/${entity}/${project}/runs/${id}`;
    },
    async send(rows: Row[]) {
      const lines = rows.map((r) => {
        const h = wandbHistoryRow(r, started);
        Object.assign(summary, finiteValues(r.values));
        return JSON.stringify(h);
      });
      await fileStream({
        files: {
          'wandb-history.jsonl': { offset, content: lines },
          'wandb-summary.json': { offset: 0, content: [JSON.stringify(summary)] },
        },
      });
      offset += lines.length;
    },
  });
  // Created now, so a wrong key or an unreachable host is told at the start of the run.
  void outbox.flush();
  return {
    kind: 'wandb',
    where: () => url,
    log(step, values) {
      const row = { step, time: Date.now(), values: { ...values } };
      local?.log(row);
      outbox.push(row);
    },
    close(outcome, timeoutMs = 30_000) {
      local?.close(outcome);
      return outbox.close(async () => {
        await fileStream({ complete: true, exitcode: outcome === 'failed' ? 1 : 0 });
      }, timeoutMs);
    },
  };
}
