/**
 * Where the `torch` backend's libtorch comes from: `RTJOB_LIBTORCH` first (a bad one is a clear
 * error, not a silent fallback), then python3's PyTorch, then Debian's; and `rtjob build torch`
 * names the one it built against.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const root = fileURLToPath(new URL('../../', import.meta.url));

function find(env: Record<string, string | undefined>): { out: string; err: string } {
  const r = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      '-e',
      "import('./model/backends/torch/build.ts').then((m) => console.log(JSON.stringify(m.findLibtorch() ?? null))).catch((e) => { console.error(e.code + ': ' + e.message); process.exit(3); })",
    ],
    { cwd: root, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000 },
  );
  return { out: r.stdout, err: r.stderr };
}

test('RTJOB_LIBTORCH wins, and a directory without libtorch is a one-line error', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-fake-libtorch-'));
  try {
    mkdirSync(join(dir, 'include', 'ATen'), { recursive: true });
    mkdirSync(join(dir, 'lib'));
    writeFileSync(join(dir, 'include', 'ATen', 'ATen.h'), '');
    writeFileSync(join(dir, 'lib', 'libtorch.so'), '');
    writeFileSync(join(dir, 'lib', 'libtorch_cuda.so'), '');
    const found = JSON.parse(find({ RTJOB_LIBTORCH: dir }).out) as Record<string, unknown>;
    assert.is(found['source'], 'RTJOB_LIBTORCH');
    assert.is(found['libDir'], join(dir, 'lib'));
    assert.is(found['cuda'], true);
    const bad = find({ RTJOB_LIBTORCH: join(dir, 'nope') });
    assert.match(bad.err, /^TORCH_BACKEND: RTJOB_LIBTORCH=.*nope has no include\/ATen\/ATen.h/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('without RTJOB_LIBTORCH: python3 torch when it imports, else Debian libtorch-dev', () => {
  const python = spawnSync('python3', ['-c', 'import torch'], { encoding: 'utf8' }).status === 0;
  const found = JSON.parse(find({ RTJOB_LIBTORCH: undefined }).out) as Record<string, unknown>;
  assert.ok(found, 'no libtorch at all: install libtorch-dev (Debian) or PyTorch');
  assert.is(found['source'], python ? 'python3' : 'debian');
});

test.run();
