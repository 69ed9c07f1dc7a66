/**
 * `rtjob eval CKPT --agent-func ./agent.ts`: held-out accuracy of a saved policy with the user's
 * agent, greedy, as `train_ppo` measures it. Runs `eval_agent` in a child process started with the
 * flags workers get, so TypeScript agents load through the same loader as in training, from the
 * installed package as from a checkout.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { ownModulePath, typescriptNodeFlags } from '../../ops/index.ts';

const evalMain = ownModulePath('../eval-main.ts', import.meta.url);

/** Runs the evaluation with `args` (everything after `rtjob eval`); resolves to its exit code. */
export async function evalCommand(args: readonly string[]): Promise<number> {
  const child = spawn(process.execPath, [...typescriptNodeFlags(), evalMain, ...args], {
    stdio: 'inherit',
  });
  // Ctrl-C reaches the child through the terminal; a TERM sent to this process is passed on.
  const forward = (sig: NodeJS.Signals) => () => child.kill(sig);
  const onTerm = forward('SIGTERM');
  const onInt = forward('SIGINT');
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onInt);
  try {
    return await new Promise<number>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + 15 : 1)));
    });
  } finally {
    process.off('SIGTERM', onTerm);
    process.off('SIGINT', onInt);
  }
}
