/**
 * What every collective backend gives: `ring` (the runtime's own TCP ring, `group.ts`, over
 * `Float32Array`s), and `gloo` and `nccl` (c10d process groups in libtorch, registered by the
 * `torch` model backend, which also reduce its tensors where they lie). The runtime names the
 * interface and keeps the registry; it never imports a backend that lives above it.
 *
 * @module
 */
import { InvalidArgumentError } from '../errors.ts';

/** Which implementation carries a group's collectives. */
export type CollectiveBackend = 'ring' | 'gloo' | 'nccl';

/** Every backend name, for checks at the edges. */
export const collectiveBackends: readonly CollectiveBackend[] = ['ring', 'gloo', 'nccl'];

/**
 * A tensor of a device backend (a TF.js tensor on `torch`), which `gloo` and `nccl` reduce where
 * it lies. Typed by its shape only, so the runtime needs no TF.js.
 */
export interface DeviceTensor {
  readonly dataId: object;
  readonly size: number;
  readonly dtype: string;
}

/** One tensor, a list of them, or named ones (visited in sorted name order on every member). */
export type TensorSet<T> = T | readonly T[] | { readonly [name: string]: T };

/** Options every operation takes. */
export interface OpOptions {
  /** @default the group's `timeoutMs` */
  timeoutMs?: number;
}

/**
 * One member's handle on a collective group, whatever carries it. Every member calls the same
 * operations in the same order with the same sizes; a member that dies or stalls fails every
 * other member's operation with `CollectiveError` within the timeout, and the group stays failed.
 * Operations change their arguments in place and resolve with them.
 */
export interface Collective<T = Float32Array> {
  readonly name: string;
  readonly rank: number;
  readonly worldSize: number;
  readonly backend: CollectiveBackend;
  /** Sum (or mean, the sum over the world size) across the group, in place. */
  allreduce<S extends TensorSet<T>>(
    tensors: S,
    opts?: OpOptions & { op?: 'sum' | 'mean' },
  ): Promise<S>;
  /** Every member's `tensors` become the root's. */
  broadcast<S extends TensorSet<T>>(tensors: S, opts?: OpOptions & { root?: number }): Promise<S>;
  /** `output` (worldSize × `input`'s length) becomes every rank's `input`, in rank order. */
  allGather<O extends T>(output: O, input: T, opts?: OpOptions): Promise<O>;
  /** `output` becomes this rank's chunk of the sum of every rank's `input` (worldSize chunks). */
  reduceScatter<O extends T>(output: O, input: T, opts?: OpOptions): Promise<O>;
  /** Resolves once every member has called it. */
  barrier(opts?: OpOptions): Promise<void>;
  /** Leaves the group; the others' next (or current) operation fails. */
  destroy(): void;
}

/**
 * Where a backend's members meet when no `initMethod` is given: rank 0 publishes its store's
 * `tcp://host:port` in the head's KV, the others read it.
 */
export interface StoreMeeting {
  /** The address this member is reachable at. */
  host: string;
  publish(url: string): Promise<unknown>;
  /** The published address; rejects at the deadline. */
  lookup(deadlineMs: number): Promise<string>;
}

/** What a backend's join gets: checked and resolved options. */
export interface CollectiveJoin {
  name: string;
  rank: number;
  worldSize: number;
  timeoutMs: number;
  joinDeadlineMs: number;
  /** torch.distributed's `tcp://host:port`, rank 0 hosting the store; else `meet`. */
  initMethod?: string;
  meet?: StoreMeeting;
  /** The address this member's transport binds (Gloo's device); @default the meeting's host. */
  host?: string;
}

type Join = (j: CollectiveJoin) => Promise<Collective<Float32Array | DeviceTensor>>;

const joins = new Map<CollectiveBackend, Join>();

/** Registers the implementation of `gloo` or `nccl` (the torch model backend does, on import). */
export function registerCollectiveBackend(name: 'gloo' | 'nccl', join: Join): void {
  joins.set(name, join);
}

/** The registered join of `name`, or a clear error naming what registers it. */
export function collectiveBackendJoin(name: 'gloo' | 'nccl'): Join {
  const join = joins.get(name);
  if (!join) {
    throw new InvalidArgumentError(
      `collective backend '${name}' is not available in this process: the torch model backend ` +
        `registers it when imported (model/backends/torch)`,
    );
  }
  return join;
}
