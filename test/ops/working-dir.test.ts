import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import * as tar from 'tar';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  PackageTooLargeError,
  packDir,
  unpackArchive,
} from '../../runtime/packages/working-dir.ts';

const base = mkdtempSync(join(tmpdir(), 'rtjob-wd-'));
let n = 0;
const fresh = (): string => join(base, `d${n++}`);

/** A small project tree with things to ignore. */
function tree(): string {
  const d = fresh();
  const put = (rel: string, text: string, mode = 0o644): void => {
    mkdirSync(join(d, rel, '..'), { recursive: true });
    writeFileSync(join(d, rel), text);
    chmodSync(join(d, rel), mode);
  };
  put('main.ts', 'console.log(1)\n');
  put('bin/run.sh', '#!/bin/sh\n', 0o755);
  put('keys/secret.key', 'k', 0o600);
  put('src/a.ckpt', 'big');
  put('src/deep/b.ckpt', 'big');
  put('src/keep.ckpt', 'small');
  put('data/x.bin', 'x');
  put('out/o.txt', 'o');
  put('src/out/inner.txt', 'kept: /out is anchored');
  put('node_modules/m/index.js', 'x');
  put('.git/HEAD', 'x');
  put('.rtjobignore', '# comment\n*.ckpt\n!keep.ckpt\ndata/\n/out\n');
  symlinkSync('/etc/passwd', join(d, 'link'));
  return d;
}

const listing = (archive: Buffer): string[] => {
  const r = spawnSync('tar', ['-tzf', '-'], { input: archive, encoding: 'utf8' });
  assert.is(r.status, 0, r.stderr);
  return r.stdout.trim().split('\n');
};

test('packs a reproducible tar.gz with .rtjobignore (gitignore syntax) applied', () => {
  const d = tree();
  const p = packDir(d);
  // A real tar.gz: the system tar reads it.
  assert.equal(listing(p.archive), [
    '.rtjobignore',
    'bin/run.sh',
    'keys/secret.key',
    'main.ts',
    'src/keep.ckpt',
    'src/out/inner.txt',
  ]);
  assert.is(p.files, 6);
  utimesSync(join(d, 'main.ts'), new Date(0), new Date(0));
  assert.is(packDir(d).hash, p.hash, 'mtime does not change the hash');
  writeFileSync(join(d, 'main.ts'), 'console.log(2)\n');
  assert.is.not(packDir(d).hash, p.hash, 'content does');
});

test('unpacks with the same permission bits, and a re-pack hashes the same', async () => {
  const p = packDir(tree());
  const out = fresh();
  await unpackArchive(p.archive, p.hash, out);
  assert.is(readFileSync(join(out, 'main.ts'), 'utf8'), 'console.log(1)\n');
  assert.is(statSync(join(out, 'bin/run.sh')).mode & 0o777, 0o755);
  assert.is(statSync(join(out, 'keys/secret.key')).mode & 0o777, 0o600);
  assert.is(packDir(out).hash, p.hash);
  await unpackArchive(p.archive, p.hash, out); // a second unpack of the same hash leaves the first
  assert.is(packDir(out).hash, p.hash);
});

test('the size limit holds when packing and when unpacking', async () => {
  const d = fresh();
  mkdirSync(d);
  writeFileSync(join(d, 'a'), Buffer.alloc(4096));
  writeFileSync(join(d, 'b'), Buffer.alloc(4096));
  assert.throws(
    () => packDir(d, 6000),
    (e: Error) => e instanceof PackageTooLargeError && e.code === 'PACKAGE_TOO_LARGE',
  );
  const p = packDir(d);
  const dest = fresh();
  const err = await unpackArchive(p.archive, p.hash, dest, 6000).catch((e: unknown) => e);
  assert.ok(err instanceof PackageTooLargeError, String(err));
  assert.not.ok(existsSync(dest), 'nothing is left behind');
});

test('a gzip bomb stops at the limit, as it inflates (the head’s memory: input-limits.test.ts)', async () => {
  const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024), { level: 9 });
  const dest = fresh();
  const err = await unpackArchive(bomb, '0'.repeat(64), dest, 4 * 1024 * 1024).catch(
    (e: unknown) => e,
  );
  assert.ok(err instanceof PackageTooLargeError, String(err));
  assert.ok((err as PackageTooLargeError).bytes <= 4 * 1024 * 1024 + 64 * 1024, 'stopped at once');
  assert.not.ok(existsSync(dest), 'nothing is left behind');
});

test('a wrong hash, a symlink or a path out of the root is refused', async () => {
  const p = packDir(tree());
  const refused = async (...a: Parameters<typeof unpackArchive>) =>
    String(
      await unpackArchive(...a).then(
        () => 'unpacked',
        (e: unknown) => e,
      ),
    );
  assert.match(await refused(p.archive, '0'.repeat(64), fresh()), /content hash/);
  const evil = fresh();
  mkdirSync(evil);
  symlinkSync('/etc', join(evil, 'etc-link'));
  const chunks: Buffer[] = [];
  tar
    .create({ cwd: evil, sync: true, portable: true }, ['etc-link'])
    .on('data', (c: Buffer) => chunks.push(c));
  const raw = Buffer.concat(chunks);
  const hash = createHash('sha256').update(raw).digest('hex');
  const dest = fresh();
  assert.match(await refused(gzipSync(raw), hash, dest), /SymbolicLink etc-link/);
  assert.not.ok(spawnSync('test', ['-e', dest]).status === 0, 'nothing is left behind');
});

test.after(() => rmSync(base, { recursive: true, force: true }));

test.run();
