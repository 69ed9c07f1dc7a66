/**
 * The `torch` TF.js backend: tensor data lives in libtorch (CUDA when the libtorch has it and a
 * GPU is visible, else CPU) behind the addon in `addon/`; a TF.js data id maps to one libtorch
 * tensor handle. Data is copied out only when TF.js reads it (`dataSync`, `data`), and freed when
 * TF.js disposes it. Kernels are in `kernels.ts`.
 *
 * @module
 */
import { createRequire } from 'node:module';
import * as tf from '@tensorflow/tfjs';
import { readEnv } from '../../../runtime/env.ts';
import { buildTorchAddon, TorchBackendError, type Libtorch } from './build.ts';

/** An opaque libtorch tensor. */
export type Handle = { readonly __torchHandle: unique symbol };
/** One op output as the addon returns it. */
export type OpOutput = [Handle, number[], tf.DataType];

/** The addon's functions (`addon/rtjob_torch.cc`). */
export interface TorchAddon {
  fromData(values: Float32Array | Int32Array | Uint8Array, shape: number[], dtype: string): Handle;
  toData(h: Handle): Float32Array | Int32Array | Uint8Array;
  free(h: Handle): void;
  op(name: string, inputs: Handle[], args: unknown[], outDtype?: tf.DataType): OpOutput[];
  info(): { version: string; cuda: boolean; device: string };
  configure(device: string, precision: string, threads: number): void;
  /**
   * The per-op counters since the last call (`op: [calls, nanoseconds inside libtorch, bytes of
   * outputs]`), then counting on or off (off by default; the bench's profile turns it on).
   */
  counters(on: boolean): Record<string, [number, number, number]>;
}

let loaded: { addon: TorchAddon; libtorch: Libtorch } | undefined;

/**
 * Builds (when needed) and loads the addon, and sets its device and precision.
 *
 * @throws TorchBackendError when no libtorch or compiler is found, or the library fails to load
 */
export function loadTorchAddon(): { addon: TorchAddon; libtorch: Libtorch } {
  if (loaded) return loaded;
  const { path, libtorch } = buildTorchAddon();
  let addon: TorchAddon;
  try {
    addon = createRequire(import.meta.url)(path) as TorchAddon;
  } catch (e) {
    throw new TorchBackendError(`torch backend: loading ${path} failed: ${String(e)}`, {
      cause: e,
    });
  }
  const { cuda } = addon.info();
  const device = readEnv('RTJOB_TORCH_DEVICE') ?? (cuda ? 'cuda' : 'cpu');
  addon.configure(device, readEnv('RTJOB_TORCH_PRECISION') ?? 'tf32', threadCount());
  loaded = { addon, libtorch };
  return loaded;
}

/** libtorch's intra-op threads: OMP_NUM_THREADS when set, else libtorch's own default. */
function threadCount(): number {
  const n = Number(process.env['OMP_NUM_THREADS']);
  return Number.isInteger(n) && n > 0 ? n : 0;
}

interface TensorData {
  /** Absent for string tensors, which stay in JS (no kernel here takes them). */
  handle?: Handle;
  strings?: Uint8Array[];
  refCount: number;
}

/** The TF.js side of the backend: data ids, reads, disposal. */
export class TorchBackend extends tf.KernelBackend {
  readonly addon: TorchAddon;
  readonly device: string;
  private readonly data: tf.DataStorage<TensorData>;

  constructor(addon: TorchAddon) {
    super();
    this.addon = addon;
    this.device = addon.info().device;
    this.data = new tf.DataStorage<TensorData>(this, tf.engine());
  }

  override write(values: tf.BackendValues, shape: number[], dtype: tf.DataType): tf.DataId {
    const dataId = {};
    this.data.set(dataId, this.store(values, shape, dtype, 1));
    return dataId;
  }

  override move(
    dataId: tf.DataId,
    values: tf.BackendValues,
    shape: number[],
    dtype: tf.DataType,
    refCount: number,
  ): void {
    this.data.set(dataId, this.store(values, shape, dtype, refCount));
  }

  private store(
    values: tf.BackendValues,
    shape: number[],
    dtype: tf.DataType,
    refCount: number,
  ): TensorData {
    if (dtype === 'string') return { strings: values as Uint8Array[], refCount };
    if (dtype === 'complex64') throw new TorchBackendError('torch backend: complex64 unsupported');
    const size = shape.reduce((a, b) => a * b, 1);
    let typed = values as Float32Array | Int32Array | Uint8Array;
    if (typed == null) typed = dtype === 'float32' ? new Float32Array(size) : new Int32Array(size);
    return { handle: this.addon.fromData(typed, shape, dtype), refCount };
  }

  /** Registers an op output as a new data id. */
  makeOutput([handle, shape, dtype]: OpOutput): tf.TensorInfo {
    const dataId = {};
    this.data.set(dataId, { handle, refCount: 1 });
    return { dataId, shape, dtype };
  }

  /** The libtorch tensor behind a TF.js tensor. */
  handle(t: tf.TensorInfo): Handle {
    const d = this.data.get(t.dataId);
    if (!d?.handle) throw new TorchBackendError(`torch backend: no ${t.dtype} tensor data`);
    return d.handle;
  }

  /** Runs one addon op over TF.js tensors; outputs become new data ids. */
  run(op: string, inputs: tf.TensorInfo[], args: unknown[] = [], outDtype?: tf.DataType) {
    const out = this.addon.op(
      op,
      inputs.map((t) => this.handle(t)),
      args,
      outDtype,
    );
    return out.map((o) => this.makeOutput(o));
  }

  /** {@link run} for ops with one output. */
  run1(op: string, inputs: tf.TensorInfo[], args: unknown[] = [], outDtype?: tf.DataType) {
    return this.run(op, inputs, args, outDtype)[0]!;
  }

  override readSync(dataId: tf.DataId): tf.BackendValues {
    const d = this.data.get(dataId);
    if (d.strings) return d.strings;
    return this.addon.toData(d.handle!);
  }

  override read(dataId: tf.DataId): Promise<tf.BackendValues> {
    return Promise.resolve(this.readSync(dataId));
  }

  override disposeData(dataId: tf.DataId, force = false): boolean {
    if (!this.data.has(dataId)) return true;
    const d = this.data.get(dataId);
    d.refCount--;
    if (!force && d.refCount > 0) return false;
    if (d.handle) this.addon.free(d.handle);
    this.data.delete(dataId);
    return true;
  }

  override refCount(dataId: tf.DataId): number {
    return this.data.has(dataId) ? this.data.get(dataId).refCount : 0;
  }

  override incRef(dataId: tf.DataId): void {
    this.data.get(dataId).refCount++;
  }

  override numDataIds(): number {
    return this.data.numDataIds();
  }

  override memory(): { unreliable: boolean; reasons?: string[] } {
    return { unreliable: true, reasons: ['libtorch owns the memory; views share storage'] };
  }

  override async time(f: () => void): Promise<tf.BackendTimingInfo> {
    const start = performance.now();
    f();
    return { kernelMs: performance.now() - start };
  }

  override timerAvailable(): boolean {
    return true;
  }

  override floatPrecision(): 32 {
    return 32;
  }

  override epsilon(): number {
    return 1e-7;
  }

  override dispose(): void {
    // Handles are freed one by one as TF.js disposes tensors; nothing process-wide to release.
  }
}
