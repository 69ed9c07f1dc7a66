/**
 * Finds a libtorch and builds the `torch` backend's N-API addon against it with g++ (no
 * node-gyp, nothing downloaded). Where libtorch comes from, in order: `RTJOB_LIBTORCH=DIR`
 * (a directory with `include/` and `lib/`), the PyTorch that `python3` imports (CUDA when it has
 * it), Debian's `libtorch-dev` (CPU, 1.13). `runtime/native-addon.ts` builds it into an ignored
 * folder keyed by the libtorch and the source, so a rebuild happens only when either changes.
 *
 * @module
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RtjobError } from '../../../runtime/errors.ts';
import { readEnv } from '../../../runtime/env.ts';
import { type AddonSource, buildAddon } from '../../../runtime/native-addon.ts';

/** No libtorch, no compiler, or a failed build: the message says which and what to do. */
export class TorchBackendError extends RtjobError<'TORCH_BACKEND'> {
  override get name(): string {
    return 'TorchBackendError';
  }
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super('TORCH_BACKEND', message, opts);
  }
}

/** A libtorch to compile and link against. */
export interface Libtorch {
  /** Where it was found: `RTJOB_LIBTORCH`, `python3` or `debian`. */
  source: 'RTJOB_LIBTORCH' | 'python3' | 'debian';
  includeDirs: string[];
  libDir: string;
  /** Has `libtorch_cuda.so` (linked so that CUDA kernels register). */
  cuda: boolean;
  /** `_GLIBCXX_USE_CXX11_ABI` the library was built with. */
  cxx11Abi: 0 | 1;
  /**
   * OpenBLAS to link ahead of libtorch (Debian's libtorch calls whatever `libblas.so.3` is; the
   * reference BLAS runs its matmuls ~15x slower than OpenBLAS).
   */
  blas?: string;
}

const here = dirname(fileURLToPath(import.meta.url));
const sourceFile = join(here, 'addon', 'rtjob_torch.cc');
/** The c10d collectives (`collective.ts`) and the header both files share. */
const moreFiles = ['c10d.cc', 'handle.h'].map((f) => join(here, 'addon', f));
const buildRoot = join(here, 'addon', 'build');

function fromDir(dir: string, source: Libtorch['source'], cxx11Abi: 0 | 1): Libtorch | undefined {
  const inc = join(dir, 'include');
  const lib = join(dir, 'lib');
  if (!existsSync(join(inc, 'ATen', 'ATen.h')) || !existsSync(join(lib, 'libtorch.so'))) return;
  return {
    source,
    includeDirs: [inc, join(inc, 'torch', 'csrc', 'api', 'include')],
    libDir: lib,
    cuda: existsSync(join(lib, 'libtorch_cuda.so')),
    cxx11Abi,
  };
}

function fromPython(): Libtorch | undefined {
  try {
    const out = execFileSync(
      'python3',
      [
        '-c',
        'import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))',
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 60_000 },
    ).trim();
    const [dir = '', abi = '1'] = out.split('\n');
    return fromDir(dir, 'python3', abi.trim() === '0' ? 0 : 1);
  } catch {
    return undefined; // no python3, or no torch in it
  }
}

function fromDebian(): Libtorch | undefined {
  const lib = '/usr/lib/x86_64-linux-gnu';
  if (!existsSync('/usr/include/ATen/ATen.h') || !existsSync(join(lib, 'libtorch.so'))) return;
  const blas = ['openblas-pthread', 'openblas-openmp']
    .map((d) => join(lib, d, 'libopenblas.so.0'))
    .find((f) => existsSync(f));
  return {
    source: 'debian',
    ...(blas ? { blas } : {}),
    // /usr/include itself is on the default path (naming it breaks libstdc++'s #include_next).
    includeDirs: ['/usr/include/torch/csrc/api/include'],
    libDir: lib,
    cuda: false,
    cxx11Abi: 1,
  };
}

/** The libtorch to use, in the documented order, or undefined when there is none. */
export function findLibtorch(): Libtorch | undefined {
  const dir = readEnv('RTJOB_LIBTORCH');
  if (dir) {
    const found = fromDir(dir, 'RTJOB_LIBTORCH', 1);
    if (!found) {
      throw new TorchBackendError(
        `RTJOB_LIBTORCH=${dir} has no include/ATen/ATen.h and lib/libtorch.so`,
      );
    }
    return found;
  }
  return fromPython() ?? fromDebian();
}

/**
 * The c10d process groups this libtorch can give: Gloo where gloo's headers are beside it or in
 * the system's (Debian's libtorch needs `libgloo-dev`), NCCL where it has CUDA and
 * ProcessGroupNCCL's and nccl's headers. Without them the addon builds with neither.
 */
export function c10dFlags(lt: Libtorch): string[] {
  const dirs = [
    ...lt.includeDirs.map((d) => d.replace(/\/torch\/csrc\/api\/include$/, '')),
    '/usr/include',
  ];
  const has = (f: string): boolean => dirs.some((d) => existsSync(join(d, f)));
  const flags: string[] = [];
  if (has('gloo/config.h')) flags.push('-DUSE_C10D_GLOO');
  if (lt.cuda && has('torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp') && has('nccl.h'))
    flags.push('-DUSE_C10D_NCCL', '-DRTJOB_WITH_NCCL');
  return flags;
}

/**
 * Builds the addon unless it is already built for this libtorch and source; returns its path.
 *
 * @param opts.log where progress lines go (default stderr)
 * @throws TorchBackendError with a one-line reason when no libtorch or no g++ is found, or the
 *   compile fails (its last lines in the message)
 */
export function buildTorchAddon(opts: { log?: (line: string) => void; force?: boolean } = {}): {
  path: string;
  libtorch: Libtorch;
} {
  const lt = findLibtorch();
  if (!lt) {
    throw new TorchBackendError(
      'torch backend: no libtorch found (set RTJOB_LIBTORCH=DIR, install PyTorch for python3, ' +
        'or apt-get install libtorch-dev)',
    );
  }
  const libs = ['-ltorch', '-ltorch_cpu', '-lc10'];
  if (lt.cuda) libs.push('-ltorch_cuda', '-lc10_cuda');
  const c10d = c10dFlags(lt);
  const addon: AddonSource = {
    what: `the torch addon against ${lt.source} libtorch (${lt.libDir})`,
    source: sourceFile,
    more: moreFiles,
    buildRoot,
    compiler: 'g++',
    key: JSON.stringify({ ...lt, c10d }),
    flags: [
      '-O2',
      // Recent PyTorch headers need C++20; Debian's 1.13 is built for C++17.
      lt.source === 'debian' ? '-std=c++17' : '-std=c++20',
      `-D_GLIBCXX_USE_CXX11_ABI=${lt.cxx11Abi}`,
      ...(lt.cuda ? ['-DRTJOB_WITH_CUDA'] : []),
      ...c10d,
      ...lt.includeDirs.flatMap((d) => ['-isystem', d]),
    ],
    link: [
      `-L${lt.libDir}`,
      `-Wl,-rpath,${lt.libDir}`,
      // libtorch_cuda registers CUDA kernels when loaded; nothing references it by symbol.
      '-Wl,--no-as-needed',
      // Loaded before libtorch, so libtorch's BLAS calls bind to OpenBLAS, whatever libblas.so.3 is.
      ...(lt.blas ? [lt.blas, `-Wl,-rpath,${dirname(lt.blas)}`] : []),
      ...libs,
    ],
  };
  let out: string;
  try {
    out = buildAddon(addon, opts);
  } catch (e) {
    throw new TorchBackendError(`torch backend: ${(e as Error).message}`, { cause: e });
  }
  return { path: out, libtorch: lt };
}
