/**
 * The `torch` TF.js backend (see `backend.ts`): importing this registers it under the name
 * `torch` (nothing is built or loaded until it is first selected) together with its kernels and
 * the model's attention on it. {@link startTorchBackend} builds the addon when needed and makes
 * `torch` the active backend, with a one-line error when it cannot.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import './attention.ts';
import './collective.ts';
import { loadTorchAddon, TorchBackend } from './backend.ts';
import { findLibtorch, TorchBackendError } from './build.ts';
import { registerTorchKernels } from './kernels.ts';

export { buildTorchAddon, findLibtorch, TorchBackendError } from './build.ts';
export { loadTorchAddon, TorchBackend } from './backend.ts';
export { torchKernelNames } from './kernels.ts';
export { C10dGroup, c10dAvailable, parseInitMethod } from './collective.ts';

registerTorchKernels('torch');
// Lowest priority: TF.js' own automatic choice (when nothing called setBackend) never builds it.
tf.registerBackend('torch', () => new TorchBackend(loadTorchAddon().addon), -1);

/**
 * Makes `torch` the active TF.js backend, building the addon first when needed.
 *
 * @returns the device tensors live on (`cpu`, `cuda`, `cuda:1`) and the libtorch version
 * @throws TorchBackendError when no libtorch or compiler is found, or the build fails
 */
export async function startTorchBackend(): Promise<{ device: string; version: string }> {
  const { addon } = loadTorchAddon(); // throws the clear error itself, before TF.js swallows it
  if (!(await tf.setBackend('torch')))
    throw new TorchBackendError("torch backend: TF.js could not start backend 'torch'");
  const { version } = addon.info();
  return { device: (tf.backend() as TorchBackend).device, version };
}

/**
 * Whether `torch` would run on a GPU here, without building anything: a libtorch with CUDA and
 * an NVIDIA device node. For the automatic backend choice.
 */
export function torchCudaLikely(): boolean {
  try {
    // /dev/nvidia0 exists where the NVIDIA driver exposes a GPU.
    return findLibtorch()?.cuda === true && existsSync('/dev/nvidia0');
  } catch {
    return false;
  }
}
