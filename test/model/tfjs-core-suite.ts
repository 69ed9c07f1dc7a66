/**
 * Runs tfjs-core's own compiled kernel test suite (`@tensorflow/tfjs-core/dist/**\/*_test.js`,
 * jasmine) against one TF.js backend, the way the wasm and node backends run it: the test files
 * are bundled (esbuild) into one script, the backend is registered as the only test environment,
 * and every spec runs. A spec that fails only because it reaches a kernel the backend does not
 * register (`Kernel 'X' not registered for backend`) counts as "not applicable", not as a
 * failure: the counts cover exactly the kernels the backend registers.
 *
 * Usage: `node --import tsx test/model/tfjs-core-suite.ts torch [--json out.json] [--filter s]`
 * Prints one line per failure and a summary; exits 1 when any applicable spec fails.
 *
 * @module
 */
import { mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const require = createRequire(import.meta.url);
const root = fileURLToPath(new URL('../../', import.meta.url));
const coreDist = join(root, 'node_modules', '@tensorflow', 'tfjs-core', 'dist');

/** Test files that need a browser, the network or files this suite has no use for. */
const skipFiles = [/\/io\//, /browser_util_test/, /worker_/, /platforms\//, /image_test_util/];

function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...testFiles(p));
    else if (name.endsWith('_test.js') && !skipFiles.some((r) => r.test(p))) out.push(p);
  }
  return out.sort();
}

export interface SuiteResult {
  backend: string;
  files: number;
  passed: number;
  failed: number;
  notApplicable: number;
  failures: { name: string; message: string }[];
}

/** Bundles and runs the suite in this process against `backend` (already registered). */
export async function runTfjsCoreSuite(
  backend: string,
  opts: { filter?: string } = {},
): Promise<SuiteResult> {
  const files = testFiles(coreDist);
  // Inside the checkout (an ignored folder), so that the bundle resolves jasmine-core.
  const dir = join(root, '.rtjob-test', `tfjs-core-suite-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  const setup = join(dir, 'setup.js');
  writeFileSync(
    setup,
    `import { setTestEnvs } from ${JSON.stringify(join(coreDist, 'jasmine_util.js'))};\n` +
      `setTestEnvs([{ name: ${JSON.stringify(backend)}, backendName: ${JSON.stringify(backend)}, isDataSync: true }]);\n`,
  );
  const entry = join(dir, 'entry.js');
  writeFileSync(
    entry,
    [setup, ...files].map((f) => `import ${JSON.stringify(f)};`).join('\n') + '\n',
  );
  const bundle = join(dir, 'suite.cjs');
  await build({
    entryPoints: [entry],
    bundle: true,
    platform: 'node',
    format: 'cjs',
    outfile: bundle,
    mainFields: ['module', 'main'],
    external: ['jasmine-core', 'jasmine-core/*', '@tensorflow/tfjs-node', 'worker_threads'],
    // tfjs-core's package.json marks its modules side-effect free, which would drop the tests.
    ignoreAnnotations: true,
    logLevel: 'error',
  });

  // jasmine's globals (describe, it, expect, ...) must exist before the test files load.
  const jr = require('jasmine-core') as {
    core(j: unknown): { getEnv(): JasmineEnv };
    interface(j: unknown, env: JasmineEnv): Record<string, unknown>;
  };
  const jasmine = jr.core(jr);
  const env = jasmine.getEnv();
  Object.assign(globalThis, jr.interface(jasmine, env));
  const warn = console.warn;
  console.warn = () => undefined; // the bundled copy of tfjs-core re-registers flags and gradients
  try {
    require(bundle);
  } finally {
    console.warn = warn;
    rmSync(dir, { recursive: true, force: true });
  }
  const result: SuiteResult = {
    backend,
    files: files.length,
    passed: 0,
    failed: 0,
    notApplicable: 0,
    failures: [],
  };
  const notRegistered = /not registered for backend|not yet implemented|unsupported dtype/;
  env.configure({
    random: false,
    specFilter: (spec: { getFullName(): string }) =>
      !opts.filter || spec.getFullName().includes(opts.filter),
  });
  await new Promise<void>((resolve) => {
    env.addReporter({
      specDone: (r: JasmineSpecResult) => {
        if (r.status === 'passed') result.passed++;
        else if (r.status === 'failed') {
          const messages = r.failedExpectations.map((f) => f.message);
          if (messages.some((m) => notRegistered.test(m))) result.notApplicable++;
          else {
            result.failed++;
            result.failures.push({ name: r.fullName, message: messages.join(' | ').slice(0, 300) });
          }
        }
      },
      jasmineDone: () => resolve(),
    });
    env.execute();
  });
  return result;
}

interface JasmineSpecResult {
  fullName: string;
  status: string;
  failedExpectations: { message: string }[];
}
interface JasmineEnv {
  configure(c: Record<string, unknown>): void;
  addReporter(r: Record<string, unknown>): void;
  execute(): void;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [backend = 'torch', ...rest] = process.argv.slice(2);
  const arg = (k: string): string | undefined => {
    const i = rest.indexOf(k);
    return i >= 0 ? rest[i + 1] : undefined;
  };
  const { initBackend } = await import('../../model/backend.ts');
  await initBackend(backend as 'torch');
  const r = await runTfjsCoreSuite(backend, { filter: arg('--filter') });
  for (const f of r.failures) console.log(`FAIL ${f.name}: ${f.message}`);
  console.log(
    `tfjs-core suite on '${backend}': ${r.passed} passed, ${r.failed} failed, ` +
      `${r.notApplicable} not applicable (kernel not registered), from ${r.files} test files ` +
      `(${relative(process.cwd(), coreDist)})`,
  );
  const json = arg('--json');
  if (json) writeFileSync(json, JSON.stringify(r, null, 2));
  process.exit(r.failed ? 1 : 0);
}
