/**
 * `rtjob build torch`: builds the `torch` TF.js backend's libtorch addon now (otherwise it is built
 * at first use), against `RTJOB_LIBTORCH`, python3's PyTorch or Debian's libtorch-dev.
 *
 * @module
 */
import { buildTorchAddon } from '../../model/backends/torch/build.ts';
import { CliError } from '../client.ts';

/** Runs `rtjob build <what>`. */
export function buildCommand(what: string, opts: { force?: boolean }): void {
  if (what !== 'torch') throw new CliError(`rtjob build: unknown target '${what}' (torch)`);
  const { path, libtorch } = buildTorchAddon({ force: opts.force });
  process.stdout.write(
    `torch addon: ${path}\nlibtorch: ${libtorch.source} (${libtorch.libDir}), ${libtorch.cuda ? 'with CUDA' : 'CPU only'}\n`,
  );
}
