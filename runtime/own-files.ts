/**
 * Where the package's own files are. In the checkout the TypeScript sources run in place (through
 * tsx); in the installed package the same tree is compiled into `dist/` (`npm run build`), so a
 * module this package spawns or loads by path is the `.js` beside the compiled caller, and the
 * assets (shipped checkpoints, the dashboard bundle, the worker's loader) are copied into `dist/`
 * at the same relative places.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** True when this code runs compiled (`dist/…/*.js`, the installed package); false in the checkout. */
export const compiled: boolean = import.meta.url.endsWith('.js');

/** The package's root folder (where its `package.json` is). */
export const packageRoot: string = fileURLToPath(
  new URL(compiled ? '../../' : '../', import.meta.url),
);

/**
 * The command that installs some of the package's optional peers (`node-llama-cpp`, `webgpu`,
 * `@tensorflow/tfjs-backend-webgpu`: the heavy engines and GPU paths a user opts into) at the
 * versions its `package.json` pins.
 *
 * @example peerInstallCommand('node-llama-cpp') // 'npm install node-llama-cpp@3.21.1'
 */
export function peerInstallCommand(...names: string[]): string {
  const { peerDependencies = {} } = JSON.parse(
    readFileSync(join(packageRoot, 'package.json'), 'utf8'),
  ) as { peerDependencies?: Record<string, string> };
  return `npm install ${names.map((n) => (peerDependencies[n] ? `${n}@${peerDependencies[n]}` : n)).join(' ')}`;
}

/**
 * The URL of one of this package's own modules, named by its TypeScript source relative to `base`
 * (the caller's `import.meta.url`): the `.ts` file in the checkout, the compiled `.js` beside the
 * caller in the installed package.
 *
 * @example ownModule('../worker/main.ts', import.meta.url)
 */
export function ownModule(relative: string, base: string | URL): URL {
  const url = new URL(relative, base);
  const fromCompiled = String(base).endsWith('.js');
  return fromCompiled ? new URL(url.href.replace(/\.ts$/, '.js')) : url;
}

/** {@link ownModule} as a file path. */
export function ownModulePath(relative: string, base: string | URL): string {
  return fileURLToPath(ownModule(relative, base));
}

/**
 * The export condition under which `rtjob`, `rtjob/agent`, … resolve to the checkout's TypeScript
 * sources instead of `dist/` (package.json `exports`; tsconfig `customConditions`).
 */
export const sourceCondition = 'rtjob-source';

/**
 * `node` flags for a child process of the checkout, so that code in it that imports the package by
 * name (`from 'rtjob/rewards'`, as the examples do) gets the sources; none in the installed package.
 */
export const checkoutNodeFlags: readonly string[] = compiled
  ? []
  : [`--conditions=${sourceCondition}`];

/**
 * `node` flags that let a child process run one of this package's own modules: none for compiled
 * JS, tsx's loader (by absolute URL, so it resolves from any cwd) for the checkout's `.ts`.
 */
export function ownModuleNodeFlags(tsxImport: string): string[] {
  return compiled ? [] : [...checkoutNodeFlags, '--import', tsxImport];
}
