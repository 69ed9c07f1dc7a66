/**
 * Runs tfjs-core's own compiled test suite (`@tensorflow/tfjs-core/dist/**\/*_test.js`, jasmine)
 * against one of rtjob's TF.js backends, the way the tfjs backends run it: one test environment
 * naming the backend, every spec of the chosen files, counts at the end. One runner for every
 * backend: `torch` (libtorch, this checkout's addon) and `webgpu` (Dawn).
 *
 * The test files are ES modules that reach tfjs-core by relative paths, so they are bundled
 * (esbuild) with jasmine and the ESM build of tfjs-core into one script, run by a child process
 * that prints one `SUITE {json}` line. The backend is registered first: `torch` through
 * `model/backend.ts` (tfjs-core keeps its engine and kernel registry on `globalThis`, so the
 * bundled copy sees the kernels), `webgpu` as its package does in a browser, on Dawn's
 * `navigator.gpu`, bundled with the tests (Dawn itself stays outside).
 *
 * A spec that fails only because it reaches a kernel the backend does not register (`Kernel 'X'
 * not registered for backend`) counts as "not applicable", not as a failure.
 *
 * Usage: `node --import tsx test/model/tfjs-core-suite.ts torch|webgpu [--json out.json] [--filter s]`
 * Prints one line per failure and a summary; exits 1 when any applicable spec fails.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build, type Plugin } from 'esbuild';

const require = createRequire(import.meta.url);
const coreDist = dirname(require.resolve('@tensorflow/tfjs-core/dist/index.js'));
const backendModule = fileURLToPath(new URL('../../model/backend.ts', import.meta.url));

/** The backends the suite runs on. */
export type SuiteBackend = 'torch' | 'webgpu';

/** Test files that need a browser, the network or files this suite has no use for. */
const skipFiles = [/\/io\//, /browser_util_test/, /worker_/, /platforms\//, /image_test_util/];

/** Every test file of tfjs-core's `dist/`, relative to it. */
function allTestFiles(dir = coreDist): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...allTestFiles(p));
    else if (name.endsWith('_test.js') && !skipFiles.some((r) => r.test(p)))
      out.push(relative(coreDist, p));
  }
  return out.sort();
}

/** Every `ops/<op>_test.js` whose `ops/<op>.js` runs at least one kernel of `registered`. */
function opTestFiles(registered: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const f of readdirSync(join(coreDist, 'ops')).sort()) {
    if (!f.endsWith('_test.js')) continue;
    let src: string;
    try {
      src = readFileSync(join(coreDist, 'ops', f.replace(/_test\.js$/, '.js')), 'utf8');
    } catch {
      continue;
    }
    const kernels = new Set([...src.matchAll(/runKernel\((\w+)/g)].map((m) => m[1]!));
    if ([...kernels].some((k) => registered.has(k))) out.push(`ops/${f}`);
  }
  return out;
}

/** What differs between backends: how the child registers it, and its test environment. */
interface BackendSetup {
  /** Module source run before the test environment exists (globals the backend needs). */
  globals: string;
  /** Module source that registers the backend. */
  register: string;
  isDataSync: boolean;
  flags: Record<string, unknown>;
  /** Node flags of the child. */
  nodeArgs: string[];
  plugins: Plugin[];
}

const setups: Record<SuiteBackend, () => BackendSetup> = {
  torch: () => ({
    globals: '',
    // The checkout's own backend (a TypeScript module: the child runs with tsx's loader).
    // A path in a variable: esbuild leaves the import to the child, which loads the checkout's.
    register: `const backendModule = ${JSON.stringify(pathToFileURL(backendModule).href)};\nconst { initBackend } = await import(backendModule);\nawait initBackend('torch');\n`,
    isDataSync: true,
    flags: {},
    nodeArgs: ['--import', 'tsx'],
    plugins: [],
  }),
  webgpu: () => ({
    globals: `import { create, globals } from 'webgpu';
Object.assign(globalThis, globals);
Object.defineProperty(globalThis, 'navigator', { value: { gpu: create([]) }, configurable: true });
`,
    register: `import '@tensorflow/tfjs-backend-webgpu';\n`,
    isDataSync: false,
    flags: { WEBGPU_CPU_FORWARD: false },
    nodeArgs: [],
    // Dawn loads its native module beside its own file: leave it there, by absolute path, since
    // the bundle lives outside the checkout.
    plugins: [
      {
        name: 'dawn-external',
        setup(b) {
          b.onResolve({ filter: /^webgpu$/ }, () => ({
            path: pathToFileURL(require.resolve('webgpu')).href,
            external: true,
          }));
        },
      },
    ],
  }),
};

/** A suite run's counts, and each applicable spec that failed. */
export interface SuiteResult {
  backend: SuiteBackend;
  files: number;
  passed: number;
  failed: number;
  notApplicable: number;
  failures: { name: string; message: string }[];
}

/** Options of {@link runTfjsCoreSuite}. */
export interface SuiteOptions {
  /** Only the op test files whose op runs one of these kernels. @default every test file */
  kernels?: ReadonlySet<string>;
  /** Only specs whose full name contains this. */
  filter?: string;
  /** Environment of the child, added to this process's (SwiftShader's for `webgpu`). */
  env?: Record<string, string>;
  /** @default 600_000 */
  timeoutMs?: number;
}

/** The jasmine entry: globals, backend, test environment, the test files, a counting reporter. */
function entrySource(backend: SuiteBackend, s: BackendSetup, files: string[], o: SuiteOptions) {
  const core = (p: string): string => JSON.stringify(join(coreDist, p));
  const env = { name: backend, backendName: backend, flags: s.flags, isDataSync: s.isDataSync };
  return {
    'globals.mjs': `import jasmineRequire from 'jasmine-core/lib/jasmine-core/jasmine.js';
const j = jasmineRequire.core(jasmineRequire);
Object.assign(globalThis, jasmineRequire.interface(j, j.getEnv()));
j.DEFAULT_TIMEOUT_INTERVAL = 60000;
// The bundled copy of tfjs-core re-registers flags, kernels and gradients: not news here.
console.warn = () => undefined;
${s.globals}`,
    'test-env.mjs': `${s.register}import ${core('public/chained_ops/register_all_chained_ops.js')};
import ${core('register_all_gradients.js')};
import { setTestEnvs } from ${core('jasmine_util.js')};
setTestEnvs([${JSON.stringify(env)}]);
`,
    'entry.mjs': `import './globals.mjs';
import './test-env.mjs';
${files.map((f) => `import ${core(f)};`).join('\n')}
const notApplicable = /not registered for backend|not yet implemented|unsupported dtype/;
const filter = ${JSON.stringify(o.filter ?? '')};
const r = { passed: 0, failed: 0, notApplicable: 0, failures: [] };
const env = jasmine.getEnv();
env.configure({ random: false, specFilter: (spec) => spec.getFullName().includes(filter) });
env.addReporter({
  specDone(s) {
    if (s.status === 'passed') r.passed++;
    else if (s.status === 'failed') {
      const messages = s.failedExpectations.map((f) => f.message);
      if (messages.some((m) => notApplicable.test(m))) r.notApplicable++;
      else {
        r.failed++;
        r.failures.push({ name: s.fullName, message: messages.join(' | ').slice(0, 300) });
      }
    }
  },
  jasmineDone() {
    process.stdout.write('SUITE ' + JSON.stringify(r) + '\\n');
    process.exit(0);
  },
});
// Dawn's pending work does not hold the event loop open by itself.
setInterval(() => undefined, 1000);
env.execute();
`,
  };
}

/** Bundles the suite for `backend` and runs it in a child process. */
export async function runTfjsCoreSuite(
  backend: SuiteBackend,
  o: SuiteOptions = {},
): Promise<SuiteResult> {
  const s = setups[backend]();
  const files = o.kernels ? opTestFiles(o.kernels) : allTestFiles();
  const dir = mkdtempSync(join(tmpdir(), `rtjob-tfjs-suite-${backend}-`));
  try {
    for (const [name, text] of Object.entries(entrySource(backend, s, files, o)))
      writeFileSync(join(dir, name), text);
    const bundle = join(dir, 'suite.mjs');
    await build({
      entryPoints: [join(dir, 'entry.mjs')],
      outfile: bundle,
      bundle: true,
      platform: 'node',
      format: 'esm',
      // The ES module builds: one tfjs-core for the tests (and a bundled backend).
      mainFields: ['module', 'main'],
      nodePaths: [join(coreDist, '..', '..', '..')],
      external: ['@tensorflow/tfjs-node', 'worker_threads'],
      plugins: s.plugins,
      logLevel: 'error',
      // tfjs-core's package.json marks its files free of side effects; a test file is nothing else.
      ignoreAnnotations: true,
      // tfjs-core's jasmine_util calls require(); give the bundle a real one.
      banner: {
        js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
      },
    });
    const out = await runChild(
      [...s.nodeArgs, bundle],
      { ...process.env, ...o.env },
      o.timeoutMs ?? 600_000,
    );
    const line = out.stdout.split('\n').find((l) => l.startsWith('SUITE '));
    if (!line) {
      throw new Error(
        `the ${backend} suite printed no summary (exit ${out.code}): ${out.stderr.slice(-2000)}`,
      );
    }
    return {
      backend,
      files: files.length,
      ...(JSON.parse(line.slice(6)) as Omit<SuiteResult, 'backend' | 'files'>),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function runChild(
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    // From the checkout, so the child's `--import tsx` resolves.
    const child = spawn(process.execPath, args, {
      cwd: fileURLToPath(new URL('../../', import.meta.url)),
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: timeoutMs,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d).slice(-64 * 1024)));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [backend = 'torch', ...rest] = process.argv.slice(2) as [SuiteBackend, ...string[]];
  const arg = (k: string): string | undefined => {
    const i = rest.indexOf(k);
    return i >= 0 ? rest[i + 1] : undefined;
  };
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
