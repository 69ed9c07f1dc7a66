/**
 * Fixes to `@tensorflow/tfjs-backend-webgpu` 4.22 kernels, installed with the backend.
 *
 * - `AddN` binds every input as its own storage buffer in one shader. Past the device's
 *   `maxStorageBuffersPerShaderStage` (8 by default: 7 inputs and the output) the pipeline is
 *   invalid, Dawn only logs a validation error, and the op returns whatever its output buffer
 *   held (measured: `addN` of 8 scalars 1..8 gave 10). The trainer's gradient norm is an `addN`
 *   over every parameter, so this was a wrong clipping factor, silently. Here the inputs are
 *   summed in groups that fit, then the partial sums likewise.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';

type KernelArgs = Parameters<tf.KernelFunc>[0];
interface GpuBackendLike {
  device?: { limits?: { maxStorageBuffersPerShaderStage?: number } };
  disposeData(dataId: object): boolean;
}

let installed = false;

/** Replaces the kernels above on the `webgpu` backend (once per process). */
export function installWebGpuKernelFixes(): void {
  if (installed) return;
  const addN = tf.getKernel('AddN', 'webgpu');
  if (!addN) return;
  installed = true;
  const original = addN.kernelFunc;
  tf.unregisterKernel('AddN', 'webgpu');
  tf.registerKernel({
    ...addN,
    kernelFunc: (args: KernelArgs) => {
      const backend = args.backend as unknown as GpuBackendLike;
      const inputs = args.inputs as unknown as tf.TensorInfo[];
      // One storage buffer is the output.
      const perPass = Math.max(
        2,
        (backend.device?.limits?.maxStorageBuffersPerShaderStage ?? 8) - 1,
      );
      if (inputs.length <= perPass) return original(args);
      let level = inputs;
      const made: tf.TensorInfo[] = [];
      while (level.length > perPass) {
        const next: tf.TensorInfo[] = [];
        for (let i = 0; i < level.length; i += perPass) {
          const group = level.slice(i, i + perPass);
          if (group.length === 1) {
            next.push(group[0]!);
            continue;
          }
          const sum = original({ ...args, inputs: group as unknown as tf.NamedTensorInfoMap });
          made.push(sum as tf.TensorInfo);
          next.push(sum as tf.TensorInfo);
        }
        level = next;
      }
      const out = original({ ...args, inputs: level as unknown as tf.NamedTensorInfoMap });
      // Partial sums are the kernel's own temporaries: the engine never sees them.
      for (const t of made) backend.disposeData(t.dataId);
      return out;
    },
  });
}
