/**
 * The `webgpu` TF.js backend in Node: Dawn from the `webgpu` npm package (Vulkan on Linux, Metal
 * on macOS, D3D12 on Windows) under `@tensorflow/tfjs-backend-webgpu`'s kernels. Both packages
 * are optional dependencies, loaded only when this backend is asked for or probed.
 *
 * The package's own registration runs only in a browser (it looks for `navigator.gpu`), so the
 * backend is registered here against a Dawn instance, with the device's storage-buffer limits
 * raised to what the adapter allows (WebGPU's defaults cap a buffer at 128 MiB, less than one
 * embedding table of a real model).
 *
 * On a machine without a GPU, Debian's `chromium` package ships SwiftShader, a software Vulkan
 * driver that Dawn accepts ({@link swiftShaderEnv}); it is slow but exact enough for tests, and
 * never chosen automatically.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { RtjobError } from '../../../runtime/errors.ts';
import { peerInstallCommand } from '../../../runtime/own-files.ts';
import { installWebGpuKernelFixes } from './kernels.ts';

/** The few parts of the WebGPU API used here (the full types live in `@webgpu/types`). */
interface AdapterInfo {
  vendor?: string;
  architecture?: string;
  device?: string;
  description?: string;
  isFallbackAdapter?: boolean;
}
interface Adapter {
  readonly info?: AdapterInfo;
  readonly isFallbackAdapter?: boolean;
  readonly limits: Record<string, number>;
  readonly features: ReadonlySet<string>;
  requestDevice(desc: {
    requiredFeatures?: string[];
    requiredLimits?: Record<string, number>;
  }): Promise<unknown>;
}
interface Gpu {
  requestAdapter(opts?: { powerPreference?: string }): Promise<Adapter | null>;
}
interface DawnModule {
  create(flags: string[]): Gpu;
  globals: object;
}
type WebGpuBackendClass = new (device: unknown, info?: AdapterInfo) => tf.KernelBackend;

/** What Dawn found: the adapter the backend would run on, described for a log line. */
export interface WebGpuAdapter {
  /** e.g. `NVIDIA H100 (nvidia, hopper)` or `SwiftShader driver 5.0.0 (google, swiftshader)` */
  readonly description: string;
  /** False for software drivers (SwiftShader, lavapipe, llvmpipe) and fallback adapters. */
  readonly hardware: boolean;
  /** The largest buffer one tensor may occupy (`maxStorageBufferBindingSize`), in bytes. */
  readonly maxTensorBytes: number;
}

/** Where Debian's chromium keeps SwiftShader and the Vulkan loader it ships with. */
const chromiumDir = '/usr/lib/chromium';

/**
 * The environment that makes Dawn find SwiftShader (Debian's `chromium` package), or undefined
 * when it is not installed. It must be set when a process starts: the dynamic loader reads
 * `LD_LIBRARY_PATH` once, so pass it to a child process.
 *
 * @example
 * spawn(process.execPath, args, { env: { ...process.env, ...swiftShaderEnv(), RTJOB_TF_BACKEND: 'webgpu' } });
 */
export function swiftShaderEnv(): Record<string, string> | undefined {
  const icd = join(chromiumDir, 'vk_swiftshader_icd.json');
  if (!existsSync(icd) || !existsSync(join(chromiumDir, 'libvulkan.so.1'))) return undefined;
  const ld = process.env.LD_LIBRARY_PATH;
  return {
    VK_ICD_FILENAMES: icd,
    LD_LIBRARY_PATH: ld ? `${chromiumDir}${delimiter}${ld}` : chromiumDir,
  };
}

/**
 * Whether Dawn could load a Vulkan driver here. Only Linux needs the check (Metal and D3D12 come
 * with the OS); it keeps the automatic choice from loading Dawn, which prints a warning when
 * `libvulkan.so.1` is missing, on every CPU-only machine.
 */
function vulkanLoaderPresent(): boolean {
  if (process.platform !== 'linux') return true;
  const dirs = [
    ...(process.env.LD_LIBRARY_PATH ?? '').split(delimiter).filter(Boolean),
    `/usr/lib/${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu`,
    '/usr/lib64',
    '/usr/lib',
    '/lib64',
    '/lib',
  ];
  return dirs.some((d) => existsSync(join(d, 'libvulkan.so.1')));
}

/** Imports an optional package; a variable specifier keeps the type checker off its types. */
async function optionalImport<T>(name: string): Promise<T | undefined> {
  try {
    const spec: string = name;
    return (await import(spec)) as T;
  } catch {
    return undefined;
  }
}

let gpu: Promise<{ gpu: Gpu; adapter: Adapter | null } | undefined> | undefined;

/** One Dawn instance and adapter per process (undefined: the `webgpu` package is missing). */
function dawn(): Promise<{ gpu: Gpu; adapter: Adapter | null } | undefined> {
  gpu ??= (async () => {
    const mod = await optionalImport<DawnModule>('webgpu');
    if (!mod) return undefined;
    // tfjs-backend-webgpu reads the WebGPU constants (GPUBufferUsage, ...) as globals, and its
    // backend refuses to start unless `navigator.gpu` exists, as in a browser.
    Object.assign(globalThis, mod.globals);
    const g = mod.create([]);
    const nav = (globalThis as { navigator?: { gpu?: unknown } }).navigator;
    if (!nav)
      Object.defineProperty(globalThis, 'navigator', { value: { gpu: g }, configurable: true });
    else if (!nav.gpu) Object.defineProperty(nav, 'gpu', { value: g, configurable: true });
    return { gpu: g, adapter: await g.requestAdapter({ powerPreference: 'high-performance' }) };
  })();
  return gpu;
}

/**
 * An adapter as the log line and the automatic choice see it: software drivers (SwiftShader,
 * llvmpipe, lavapipe, Microsoft's basic renderer) and fallback adapters are not hardware.
 */
export function describeAdapter(
  adapter: Pick<Adapter, 'info' | 'isFallbackAdapter' | 'limits'>,
): WebGpuAdapter {
  const i = adapter.info ?? {};
  const name = i.description || i.device || 'unnamed adapter';
  const detail = [i.vendor, i.architecture].filter(Boolean).join(', ');
  const text = `${name} ${i.architecture ?? ''} ${i.device ?? ''}`;
  const software =
    i.isFallbackAdapter === true ||
    adapter.isFallbackAdapter === true ||
    /swiftshader|llvmpipe|lavapipe|software|microsoft basic render/i.test(text);
  return {
    description: detail ? `${name} (${detail})` : name,
    hardware: !software,
    maxTensorBytes: adapter.limits.maxStorageBufferBindingSize ?? 0,
  };
}

/**
 * The adapter Dawn offers, or undefined when there is none (no `webgpu` package, no Vulkan
 * loader or driver). Loads Dawn at most once per process.
 *
 * @param opts.quiet skip the probe where no Vulkan loader is installed (the automatic choice)
 */
export async function probeWebGpu(
  opts: { quiet?: boolean } = {},
): Promise<WebGpuAdapter | undefined> {
  if (opts.quiet && !vulkanLoaderPresent()) return undefined;
  const d = await dawn();
  return d?.adapter ? describeAdapter(d.adapter) : undefined;
}

const installWebGpu = () => peerInstallCommand('webgpu', '@tensorflow/tfjs-backend-webgpu');

/** Why `webgpu` cannot start here, in one line, or undefined when it can. */
export async function webGpuUnavailable(): Promise<string | undefined> {
  if (!(await optionalImport('@tensorflow/tfjs-backend-webgpu')))
    return `the webgpu backend's packages are optional peers, not installed: ${installWebGpu()}`;
  const d = await dawn();
  if (!d) return `the webgpu backend's Dawn bindings are not installed: ${installWebGpu()}`;
  if (!d.adapter)
    return (
      'Dawn found no GPU adapter (Linux needs libvulkan1 and a Vulkan driver; without a GPU, ' +
      "Debian's chromium provides SwiftShader: VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json " +
      'LD_LIBRARY_PATH=/usr/lib/chromium)'
    );
  return undefined;
}

/**
 * Thrown by a synchronous read (`dataSync`, `arraySync`) of a tensor that lives on the GPU:
 * Dawn maps buffers only asynchronously, and the backend's browser workaround (drawing into an
 * `OffscreenCanvas`) does not exist in Node.
 */
export class WebGpuSyncReadError extends RtjobError<'WEBGPU_SYNC_READ'> {
  override get name(): string {
    return 'WebGpuSyncReadError';
  }
  constructor() {
    super(
      'WEBGPU_SYNC_READ',
      "the webgpu backend cannot read a GPU tensor synchronously in Node (Dawn maps buffers only asynchronously): read it with 'await tensor.data()', or use another backend for this path",
    );
  }
}

/** The package's backend with a synchronous read that fails clearly instead of on a browser API. */
function nodeBackend(Base: WebGpuBackendClass): WebGpuBackendClass {
  type Data = { values?: unknown; dtype?: string };
  const proto = Base.prototype as unknown as {
    readSync(dataId: object): unknown;
    tensorMap: { get(id: object): Data | undefined };
  };
  const readSync = proto.readSync;
  return class extends (Base as unknown as new (...a: unknown[]) => object) {
    readSync(this: typeof proto, dataId: object): unknown {
      const d = this.tensorMap.get(dataId);
      // Values still on the CPU (uploaded, not yet used on the GPU) read as before.
      if (d?.values != null || d?.dtype === 'string') return readSync.call(this, dataId);
      throw new WebGpuSyncReadError();
    }
  } as unknown as WebGpuBackendClass;
}

/** WebGPU limits raised to the adapter's, so that large tensors fit one buffer. */
const raisedLimits = [
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeWorkgroupsPerDimension',
  'maxComputeWorkgroupSizeX',
  'maxComputeInvocationsPerWorkgroup',
  'maxStorageBuffersPerShaderStage',
];

/**
 * Registers the `webgpu` TF.js backend on Dawn's adapter (once). Resolves to false when it
 * cannot run here; {@link webGpuUnavailable} says why.
 */
export async function registerWebGpu(): Promise<boolean> {
  if (tf.findBackendFactory('webgpu')) return true;
  const pkg = await optionalImport<{ WebGPUBackend: WebGpuBackendClass }>(
    '@tensorflow/tfjs-backend-webgpu',
  );
  const d = await dawn();
  const adapter = d?.adapter;
  if (!pkg || !adapter) return false;
  installWebGpuKernelFixes();
  tf.registerBackend('webgpu', async () => {
    const requiredLimits: Record<string, number> = {};
    for (const k of raisedLimits)
      if (adapter.limits[k] !== undefined) requiredLimits[k] = adapter.limits[k];
    const requiredFeatures = ['timestamp-query'].filter((f) => adapter.features.has(f));
    const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
    return new (nodeBackend(pkg.WebGPUBackend))(device, adapter.info);
  });
  return true;
}
