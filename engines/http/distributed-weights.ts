/**
 * Full weights to HTTP servers in memory (OpenRLHF's `--vllm_sync_backend nccl|gloo`): this
 * process is rank 0 of a c10d group (`runtime/collective/backend.ts`, the torch addon's Gloo or
 * NCCL) and hosts its `TCPStore`, the servers join as ranks 1..N through their own route
 * (SGLang `/init_weights_update_group`, vLLM `/init_weight_transfer_engine`), as in SGLang's and
 * vLLM's RL examples. Each update goes in buckets (AReaL's 1 GiB): one HTTP call per server
 * announces a bucket's names, dtypes and shapes, and rank 0 broadcasts its tensors, one
 * broadcast per tensor in that order, while the call waits for them.
 *
 * The group is formed on the first update and kept while the same servers are up; a failed
 * transfer destroys it (the next update forms a new one). The engine (`remote-engine.ts`) runs
 * this under the same pause, deadline and version rules as a reload from disk.
 *
 * @module
 */
import type { NamedTensors } from '../../model/tensors.ts';
import {
  type Collective,
  type DeviceTensor,
  collectiveBackendJoin,
} from '../../runtime/collective/backend.ts';
import { EngineError } from './errors.ts';

/** Calls a route on one server (the engine's `ServerCall`): JSON body → JSON answer. */
export type ServerCall = (path: string, body?: unknown) => Promise<unknown>;

/** How full weights reach servers: a checkpoint they reload, or a broadcast over c10d. */
export type WeightSyncBackend = 'disk' | 'gloo' | 'nccl';

/** Every {@link WeightSyncBackend}, for checks at the edges. */
export const weightSyncBackends: readonly WeightSyncBackend[] = ['disk', 'gloo', 'nccl'];

/** Options of the in-memory sync (`RemoteEngineOptions.weightSync`). */
export interface DistributedSyncOptions {
  /** What carries the broadcast. */
  backend: 'gloo' | 'nccl';
  /** The address the servers reach this process at (its store and Gloo device). @default '127.0.0.1' */
  host?: string;
  /** Most bytes announced and broadcast in one call. @default 1 GiB */
  bucketBytes?: number;
}

/** Defaults of {@link DistributedSyncOptions}. */
export const distributedSyncDefaults = { host: '127.0.0.1', bucketBytes: 2 ** 30 } as const;

/** What a server is told of one bucket before its broadcasts. */
export interface BucketMeta {
  names: string[];
  dtypes: string[];
  shapes: number[][];
}

/** One bucket: its announcement and its tensors in broadcast order. */
export interface WeightBucket extends BucketMeta {
  data: Float32Array[];
  bytes: number;
}

/** How a server joins the group (SGLang's and vLLM's init bodies carry these). */
export interface WeightGroupInit {
  masterAddress: string;
  masterPort: number;
  /** The server's first rank (its tensor-parallel ranks follow). */
  rankOffset: number;
  worldSize: number;
  groupName: string;
  backend: 'gloo' | 'nccl';
}

/** The routes of a server kind that receive weights in memory. */
export interface DistributedRoutes {
  /** Joins the group; resolves once the server's ranks are in it. */
  init(call: ServerCall, init: WeightGroupInit): Promise<void>;
  /** Leaves the group (best effort, before another is formed). */
  destroy(call: ServerCall, groupName: string): Promise<void>;
  /** Before the first bucket of an update. */
  begin?(call: ServerCall): Promise<void>;
  /** Announces one bucket; resolves once the server received it. `version` on the last one. */
  receive(
    call: ServerCall,
    bucket: BucketMeta,
    groupName: string,
    version: number | undefined,
  ): Promise<void>;
  /** After the last bucket: the server serves the new weights. */
  finish?(call: ServerCall, version: number): Promise<void>;
}

/** `tensors` in sorted name order, cut into buckets of at most `maxBytes` (a bigger tensor alone). */
export function weightBuckets(tensors: NamedTensors, maxBytes: number): WeightBucket[] {
  const out: WeightBucket[] = [];
  let cur: WeightBucket | undefined;
  for (const name of Object.keys(tensors).sort()) {
    const t = tensors[name]!;
    const bytes = t.data.byteLength;
    if (!cur || (cur.bytes > 0 && cur.bytes + bytes > maxBytes)) {
      cur = { names: [], dtypes: [], shapes: [], data: [], bytes: 0 };
      out.push(cur);
    }
    cur.names.push(name);
    cur.dtypes.push('float32');
    cur.shapes.push([...t.shape]);
    cur.data.push(t.data);
    cur.bytes += bytes;
  }
  return out;
}

/** Per server, what the transfer did; `landed`: some bucket reached the servers' weights. */
export interface TransferResult {
  results: PromiseSettledResult<void>[];
  landed: boolean;
}

type Group = Collective<Float32Array | DeviceTensor>;
let groups = 0;

/** Rank 0 of the weight-update group of one engine's servers. */
export class DistributedWeights {
  private group: { urls: string[]; name: string; c: Group } | undefined;
  private readonly host: string;
  private readonly bucketBytes: number;
  private ready: Promise<void> | undefined;

  constructor(
    private readonly opts: DistributedSyncOptions,
    private readonly kind: string,
    private readonly routes: DistributedRoutes,
  ) {
    this.host = opts.host ?? distributedSyncDefaults.host;
    this.bucketBytes = opts.bucketBytes ?? distributedSyncDefaults.bucketBytes;
    if (!(this.bucketBytes > 0))
      throw new EngineError('CONFIG', `bucketBytes must be > 0, got ${this.bucketBytes}`);
  }

  /**
   * Sends `tensors` as `version` to `urls` (each called through `callOf`) by `deadline`; one
   * result per server. A broadcast that fails fails every server of the transfer.
   */
  async send(
    urls: string[],
    tensors: NamedTensors,
    version: number,
    callOf: (url: string) => ServerCall,
    deadline: number,
  ): Promise<TransferResult> {
    const failed = (e: unknown): TransferResult => ({
      results: urls.map(() => ({ status: 'rejected', reason: e })),
      landed: false,
    });
    let g: Group;
    try {
      g = await this.ensure(urls, callOf, deadline, version);
    } catch (e) {
      return failed(e);
    }
    const buckets = weightBuckets(tensors, this.bucketBytes);
    const name = this.group!.name;
    const results: PromiseSettledResult<void>[] = urls.map(() => ({
      status: 'fulfilled',
      value: undefined,
    }));
    const each = (f: (call: ServerCall) => Promise<void>) =>
      Promise.allSettled(urls.map((u) => f(callOf(u)))).then((rs) =>
        rs.forEach((r, i) => {
          if (r.status === 'rejected' && results[i]!.status === 'fulfilled') results[i] = r;
        }),
      );
    let landed = false;
    if (this.routes.begin) await each((c) => this.routes.begin!(c));
    for (const [i, b] of buckets.entries()) {
      if (results.every((r) => r.status === 'rejected')) break;
      const v = i === buckets.length - 1 ? version : undefined;
      const meta = { names: b.names, dtypes: b.dtypes, shapes: b.shapes };
      const sent = this.broadcast(g, b.data, version, deadline).then(
        () => undefined,
        (e: unknown) => e,
      );
      await each((c) => this.routes.receive(c, meta, name, v));
      // A server that answered has loaded the bucket, whatever rank 0's broadcast does next.
      landed ||= results.some((r) => r.status === 'fulfilled');
      // Where no server receives any more the broadcast cannot end: it fails at its timeout
      // after the group is left, and nobody waits for it.
      if (results.every((r) => r.status === 'rejected')) break;
      const err = await sent;
      if (err !== undefined)
        results.forEach((r, j) => {
          if (r.status === 'fulfilled') results[j] = { status: 'rejected', reason: err };
        });
    }
    if (this.routes.finish && results.some((r) => r.status === 'fulfilled'))
      await each((c) => this.routes.finish!(c, version));
    if (results.some((r) => r.status === 'rejected')) this.reset(urls, callOf);
    return { results, landed };
  }

  /**
   * Loads the torch addon (built on first use, which may take minutes) and checks it has the
   * backend, before an update's deadline starts.
   */
  prepare(): Promise<void> {
    this.ready ??= import('../../model/backends/torch/collective.ts').then(({ c10dAvailable }) => {
      if (!c10dAvailable()[this.opts.backend])
        throw new EngineError(
          'CONFIG',
          `weights over ${this.opts.backend}: the torch addon was built without it (gloo: apt-get install libgloo-dev; nccl: a CUDA libtorch)`,
        );
    });
    return this.ready;
  }

  /** Leaves the group; the next update forms a new one. */
  close(): void {
    this.group?.c.destroy();
    this.group = undefined;
  }

  private async broadcast(
    g: Group,
    data: Float32Array[],
    version: number,
    deadline: number,
  ): Promise<void> {
    try {
      // One broadcast per tensor, as the servers post one receive per announced name.
      await Promise.all(
        data.map((d) => g.broadcast(d, { root: 0, timeoutMs: Math.max(1, deadline - Date.now()) })),
      );
    } catch (e) {
      const msg = (e as Error).message;
      throw new EngineError(
        /timed? ?out/i.test(msg) ? 'TIMEOUT' : 'NETWORK',
        `weight update to version ${version}: the ${this.opts.backend} broadcast failed: ${msg}`,
        { cause: e, phase: 'reload' },
      );
    }
  }

  /** The group of `urls`, formed now when there is none or its servers changed. */
  private async ensure(
    urls: string[],
    callOf: (url: string) => ServerCall,
    deadline: number,
    version: number,
  ): Promise<Group> {
    const cur = this.group;
    if (cur && cur.urls.join(' ') === urls.join(' ')) return cur.c;
    if (cur) this.reset(cur.urls, callOf);
    const name = `rtjob-weights-${process.pid}-${++groups}`;
    const worldSize = urls.length + 1;
    let port!: (url: string) => void;
    const published = new Promise<string>((r) => (port = r));
    const timeoutMs = Math.max(1, deadline - Date.now());
    const joined = collectiveBackendJoin(this.opts.backend)({
      name,
      rank: 0,
      worldSize,
      timeoutMs,
      joinDeadlineMs: deadline,
      host: this.host,
      meet: {
        host: this.host,
        publish: async (url) => {
          if (url) port(url);
        },
        lookup: () => Promise.reject(new Error('rank 0 looks nothing up')),
      },
    });
    const failed = joined.then(
      () => new Promise<never>(() => {}),
      (e: unknown) => Promise.reject(e),
    );
    let c: Group;
    try {
      const masterPort = Number(/:(\d+)$/.exec(await Promise.race([published, failed]))![1]);
      const inits = urls.map((u, i) =>
        this.routes.init(callOf(u), {
          masterAddress: this.host,
          masterPort,
          rankOffset: i + 1,
          worldSize,
          groupName: name,
          backend: this.opts.backend,
        }),
      );
      // The first failure ends the wait: a server that refused will never join.
      [c] = await Promise.all([joined, ...inits]);
    } catch (e) {
      void joined.then(
        (g) => g.destroy(),
        () => {},
      );
      const why = e as Error & { code?: string };
      throw new EngineError(
        why.code === 'TIMEOUT' || /timed? ?out/i.test(why.message) ? 'TIMEOUT' : 'NETWORK',
        `weight update to version ${version}: ${this.kind} servers did not join the ${this.opts.backend} weight group: ${why.message.split('\n')[0]}`,
        { cause: e, phase: 'reload' },
      );
    }
    this.group = { urls: [...urls], name, c };
    return c;
  }

  private reset(urls: string[], callOf: (url: string) => ServerCall): void {
    const g = this.group;
    this.group = undefined;
    if (!g) return;
    g.c.destroy();
    for (const u of urls) void this.routes.destroy(callOf(u), g.name).catch(() => {});
  }
}
