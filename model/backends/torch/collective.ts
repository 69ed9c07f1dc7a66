/**
 * The `gloo` and `nccl` collective backends (`runtime/collective/backend.ts`): a c10d process
 * group in the torch addon (`addon/c10d.cc`). Tensors stay in libtorch: a TF.js tensor on
 * `torch` goes by its handle, a `Float32Array` is read and written where it lies (CPU). The
 * rendezvous is torch.distributed's (`tcp://host:port`, rank 0 hosting a `TCPStore`, the store
 * laid out as `init_process_group`'s default group), so a Python process that calls
 * `torch.distributed.init_process_group('gloo', init_method=…, world_size=…, rank=…)` is a member.
 *
 * Each operation runs on a libuv worker thread (the event loop stays free); operations of one
 * group run one after another, in call order. A peer that dies fails the operation at once (its
 * connection closes); one that stalls, at the operation's timeout, which is kept here whatever
 * the worker thread still waits on (Gloo's own timeout, one per group in torch 1.13, may be the
 * longer join timeout). The memory an operation touches stays referenced until the thread ends.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import {
  type Collective,
  type CollectiveBackend,
  type CollectiveJoin,
  type DeviceTensor,
  type OpOptions,
  type TensorSet,
  registerCollectiveBackend,
} from '../../../runtime/collective/backend.ts';
import { CollectiveError, InvalidArgumentError } from '../../../runtime/errors.ts';
import { type Handle, type TorchBackend, loadTorchAddon } from './backend.ts';

/** The addon's c10d functions. */
export interface C10dAddon {
  c10dBackends(): { gloo: boolean; nccl: boolean };
  c10dStore(
    host: string,
    port: number,
    isServer: boolean,
    worldSize: number,
    timeoutMs: number,
  ): Promise<[C10dStore, number]>;
  c10dGroup(
    store: C10dStore,
    backend: 'gloo' | 'nccl',
    rank: number,
    worldSize: number,
    timeoutMs: number,
    deviceHost: string,
  ): Promise<C10dGroupRef>;
  c10dRun(
    group: C10dGroupRef,
    op: 'allreduce' | 'broadcast' | 'allgather' | 'reduceScatter' | 'barrier',
    tensors: (Handle | Float32Array)[],
    arg: number,
  ): Promise<void>;
  c10dClose(group: C10dGroupRef): Promise<void>;
}
type C10dStore = { readonly __c10dStore: unique symbol };
type C10dGroupRef = { readonly __c10dGroup: unique symbol };

type Tensor = Float32Array | DeviceTensor;

/** How long past Gloo's own timeout a caller waits for its error before failing itself. */
const nativeGraceMs = 2000;

function addon(): C10dAddon {
  return loadTorchAddon().addon as unknown as C10dAddon;
}

/** Which c10d process groups the torch addon was built with (loads it). */
export function c10dAvailable(): { gloo: boolean; nccl: boolean } {
  return addon().c10dBackends();
}

/**
 * The collective backend of data-parallel ranks on the TF.js backend in use: `nccl` on `torch`
 * on CUDA, `gloo` on `torch` on CPU (where the addon has them), `ring` elsewhere. Builds nothing
 * when the torch backend is not the one in use.
 */
export function defaultCollectiveBackend(): CollectiveBackend {
  if (tf.getBackend() !== 'torch') return 'ring';
  const device = (tf.backend() as TorchBackend).device;
  const has = c10dAvailable();
  if (device.startsWith('cuda')) return has.nccl ? 'nccl' : 'ring';
  return has.gloo ? 'gloo' : 'ring';
}

/** `tcp://host:port` → its parts. */
export function parseInitMethod(url: string): { host: string; port: number } {
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:/]+):(\d+)\/?$/.exec(url);
  const port = Number(m?.[2]);
  if (!m || !(port > 0 && port < 65536))
    throw new InvalidArgumentError(`initMethod must be tcp://host:port, got '${url}'`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

function joinError(j: CollectiveJoin, e: unknown): CollectiveError {
  if (e instanceof CollectiveError) return e;
  const msg = (e as Error).message ?? String(e);
  return new CollectiveError(
    `joining collective group '${j.name}' as rank ${j.rank} failed: ${msg}`,
    { context: { group: j.name, rank: j.rank, reason: reasonOf(msg) }, cause: e },
  );
}

function reasonOf(message: string): 'timeout' | 'member-left' {
  return /timed? ?out/i.test(message) ? 'timeout' : 'member-left';
}

async function join(
  backend: 'gloo' | 'nccl',
  j: CollectiveJoin,
): Promise<Collective<Float32Array | DeviceTensor>> {
  const a = addon();
  if (!a.c10dBackends()[backend]) {
    throw new CollectiveError(
      `collective backend '${backend}' is not in this torch addon (${
        backend === 'gloo'
          ? 'no gloo headers at build time: apt-get install libgloo-dev'
          : 'needs a CUDA libtorch with ProcessGroupNCCL and nccl headers'
      })`,
      { context: { group: j.name, rank: j.rank, reason: 'unavailable' } },
    );
  }
  const joinMs = Math.max(1, j.joinDeadlineMs - Date.now());
  try {
    let host: string;
    let port: number;
    if (j.initMethod !== undefined) ({ host, port } = parseInitMethod(j.initMethod));
    else if (j.rank === 0) ({ host, port } = { host: j.meet!.host, port: 0 });
    else ({ host, port } = parseInitMethod(await j.meet!.lookup(j.joinDeadlineMs)));
    const [store, bound] = await a.c10dStore(host, port, j.rank === 0, j.worldSize, joinMs);
    if (j.initMethod === undefined && j.rank === 0) await j.meet!.publish(`tcp://${host}:${bound}`);
    const deviceHost = j.host ?? j.meet?.host ?? host;
    // torch 1.13's Gloo has one timeout per group, for its full-mesh setup and every transfer
    // alike: the longer of the two, so a member still starting does not fail the setup; the
    // operations' own deadline is kept here.
    const nativeMs = Math.max(j.timeoutMs, Math.max(1, j.joinDeadlineMs - Date.now()));
    const ref = await a.c10dGroup(store, backend, j.rank, j.worldSize, nativeMs, deviceHost);
    const timeouts = { timeoutMs: j.timeoutMs, nativeMs };
    return new C10dGroup(j.name, j.rank, j.worldSize, backend, timeouts, a, ref, () => {
      if (j.initMethod === undefined && j.rank === 0) void j.meet!.publish('').catch(() => {});
    });
  } catch (e) {
    throw joinError(j, e);
  }
}

/** One member's handle on a c10d group. */
export class C10dGroup implements Collective<Float32Array | DeviceTensor> {
  private tail: Promise<unknown> = Promise.resolve();
  private broken: CollectiveError | undefined;
  private closed = false;

  /** @internal Use `initCollectiveGroup({ backend: 'gloo' })`. */
  constructor(
    readonly name: string,
    readonly rank: number,
    readonly worldSize: number,
    readonly backend: 'gloo' | 'nccl',
    private readonly timeouts: { timeoutMs: number; nativeMs: number },
    private readonly addon: C10dAddon,
    private readonly ref: C10dGroupRef,
    private readonly onDestroy: () => void,
  ) {}

  async allreduce<S extends TensorSet<Tensor>>(
    tensors: S,
    opts: OpOptions & { op?: 'sum' | 'mean' } = {},
  ): Promise<S> {
    const op = opts.op ?? 'sum';
    if (op !== 'sum' && op !== 'mean')
      throw new InvalidArgumentError(`allreduce op must be 'sum' or 'mean', got '${String(op)}'`);
    await this.run(`allreduce(${op})`, opts, listOf(tensors), op === 'mean' ? 1 : 0, 'allreduce');
    return tensors;
  }

  async broadcast<S extends TensorSet<Tensor>>(
    tensors: S,
    opts: OpOptions & { root?: number } = {},
  ): Promise<S> {
    const root = opts.root ?? 0;
    if (!Number.isInteger(root) || root < 0 || root >= this.worldSize)
      throw new InvalidArgumentError(
        `broadcast root must be 0..${this.worldSize - 1}, got ${root}`,
      );
    await this.run(`broadcast(root ${root})`, opts, listOf(tensors), root, 'broadcast');
    return tensors;
  }

  async allGather<O extends Tensor>(output: O, input: Tensor, opts: OpOptions = {}): Promise<O> {
    await this.run('allGather', opts, [output, input], 0, 'allgather');
    return output;
  }

  async reduceScatter<O extends Tensor>(
    output: O,
    input: Tensor,
    opts: OpOptions = {},
  ): Promise<O> {
    await this.run('reduceScatter', opts, [output, input], 0, 'reduceScatter');
    return output;
  }

  async barrier(opts: OpOptions = {}): Promise<void> {
    await this.run('barrier', opts, [], 0, 'barrier');
  }

  /** Leaves the group: its process group is released once the operation in flight ends. */
  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    this.broken ??= new CollectiveError(
      `collective group '${this.name}' was destroyed on rank ${this.rank}`,
      { context: { group: this.name, rank: this.rank, reason: 'destroyed' } },
    );
    this.onDestroy();
    const close = () => this.addon.c10dClose(this.ref).catch(() => {});
    void this.tail.then(close, close);
  }

  private run(
    what: string,
    opts: OpOptions,
    tensors: Tensor[],
    arg: number,
    op: Parameters<C10dAddon['c10dRun']>[1],
  ): Promise<void> {
    const handles = tensors.map((t) => handleOf(t, what));
    const timeoutMs = opts.timeoutMs ?? this.timeouts.timeoutMs;
    // Where Gloo's own timeout is this one, its error (the more telling) gets a moment to come first.
    const graceMs = timeoutMs >= this.timeouts.nativeMs ? nativeGraceMs : 0;
    const go = (): Promise<void> => {
      if (this.broken) return Promise.reject(this.broken);
      const native = this.addon.c10dRun(this.ref, op, handles, arg);
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`timed out after ${timeoutMs} ms`)),
          timeoutMs + graceMs,
        );
      });
      return Promise.race([native, deadline]).then(
        () => clearTimeout(timer),
        (e: unknown) => {
          clearTimeout(timer);
          const msg = (e as Error).message ?? String(e);
          this.broken ??= new CollectiveError(
            `collective group '${this.name}' (${this.backend}): ${what} on rank ${this.rank} failed: ${msg.split('\n')[0]}`,
            {
              context: { group: this.name, rank: this.rank, reason: reasonOf(msg), op: what },
              cause: e,
            },
          );
          throw this.broken;
        },
      );
    };
    const p = this.tail.then(go, go);
    this.tail = p.catch(() => {});
    return p;
  }
}

function listOf(t: TensorSet<Tensor>): Tensor[] {
  if (t instanceof Float32Array || isDeviceTensor(t)) return [t as Tensor];
  if (Array.isArray(t)) return [...(t as readonly Tensor[])];
  const named = t as { readonly [name: string]: Tensor };
  return Object.keys(named)
    .sort()
    .map((k) => named[k]!);
}

function isDeviceTensor(t: unknown): t is DeviceTensor {
  return typeof t === 'object' && t !== null && 'dataId' in t && 'dtype' in t;
}

function handleOf(t: Tensor, what: string): Handle | Float32Array {
  if (t instanceof Float32Array) return t;
  if (!isDeviceTensor(t) || t.dtype !== 'float32')
    throw new InvalidArgumentError(`${what} takes float32 tensors or Float32Arrays`);
  const backend = tf.engine().findBackend('torch') as TorchBackend | null;
  if (!backend) throw new InvalidArgumentError(`${what}: the torch backend is not started`);
  return backend.handle(t as unknown as tf.TensorInfo);
}

registerCollectiveBackend('gloo', (j) => join('gloo', j));
registerCollectiveBackend('nccl', (j) => join('nccl', j));
