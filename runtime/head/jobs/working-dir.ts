/**
 * Working-dir packages: the client packs a directory (without `node_modules`, `.git` and the
 * patterns in `.rtjobignore`) into one gzip'd archive named by the sha256 of its contents; the
 * head stores it once per hash and unpacks it once per hash for every job that uses it.
 *
 * Archive layout (before gzip), entries sorted by path so equal trees hash equal:
 * `[u32 pathLen][path utf8][u32 mode][u32 size][bytes]...`
 *
 * @module
 */
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { RtjobError } from '../../errors.ts';

/** Largest package the head accepts, compressed. @default 100 MiB */
export const defaultMaxPackageBytes = 100 * 1024 * 1024;

/** Names never packed, wherever they appear. */
const alwaysIgnored = new Set(['node_modules', '.git']);

/** Thrown when a directory is larger than allowed; `code` for checks across boundaries. */
export class PackageTooLargeError extends RtjobError<'PACKAGE_TOO_LARGE'> {
  constructor(
    readonly bytes: number,
    readonly maxBytes: number,
  ) {
    super(
      'PACKAGE_TOO_LARGE',
      `working dir is ${(bytes / 1048576).toFixed(1)} MiB, over the ${(maxBytes / 1048576).toFixed(0)} MiB limit; ` +
        'exclude large files with a .rtjobignore file (one pattern per line)',
    );
  }
}

/** Turns a `.rtjobignore` glob (`*.ckpt`, `data/`, `/out`) into a test on a relative path. */
function ignoreMatcher(patterns: string[]): (rel: string, isDir: boolean) => boolean {
  const tests = patterns
    .map((p) => p.trim())
    .filter((p) => p && !p.startsWith('#'))
    .map((p) => {
      const dirOnly = p.endsWith('/');
      const anchored = p.startsWith('/') || p.slice(0, -1).includes('/');
      const body = p.replace(/^\//, '').replace(/\/$/, '');
      const re = new RegExp(
        '^' +
          body
            .split('**')
            .map((part) =>
              part
                .replace(/[.+^${}()|[\]\\]/g, '\\$&')
                .replace(/\*/g, '[^/]*')
                .replace(/\?/g, '[^/]'),
            )
            .join('.*') +
          '$',
      );
      return (rel: string, isDir: boolean) => {
        if (dirOnly && !isDir) return false;
        if (anchored) return re.test(rel);
        return re.test(rel.slice(rel.lastIndexOf('/') + 1));
      };
    });
  return (rel, isDir) => tests.some((t) => t(rel, isDir));
}

/** A packed directory, ready to upload. */
export interface PackedDir {
  hash: string;
  archive: Buffer;
  files: number;
  rawBytes: number;
}

/**
 * Packs `dir`. Throws {@link PackageTooLargeError} when the files total more than `maxBytes`
 * (checked while walking, so a huge directory fails fast instead of being read).
 */
export function packDir(dir: string, maxBytes = defaultMaxPackageBytes): PackedDir {
  const root = resolve(dir);
  const ignoreFile = join(root, '.rtjobignore');
  const ignored = ignoreMatcher(existsSync(ignoreFile) ? readFileSync(ignoreFile, 'utf8').split('\n') : []);
  const entries: { rel: string; abs: string; mode: number; size: number }[] = [];
  let total = 0;
  const walk = (abs: string) => {
    for (const name of readdirSync(abs)) {
      if (alwaysIgnored.has(name)) continue;
      const child = join(abs, name);
      const rel = relative(root, child).split(sep).join('/');
      const st = lstatSync(child);
      if (st.isSymbolicLink()) continue;
      if (ignored(rel, st.isDirectory())) continue;
      if (st.isDirectory()) walk(child);
      else if (st.isFile()) {
        total += st.size;
        if (total > maxBytes) throw new PackageTooLargeError(total, maxBytes);
        entries.push({ rel, abs: child, mode: st.mode & 0o777, size: st.size });
      }
    }
  };
  walk(root);
  entries.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
  const parts: Buffer[] = [];
  for (const e of entries) {
    const path = Buffer.from(e.rel, 'utf8');
    const data = readFileSync(e.abs);
    const head = Buffer.allocUnsafe(12);
    head.writeUInt32LE(path.length, 0);
    head.writeUInt32LE(e.mode, 4);
    head.writeUInt32LE(data.length, 8);
    parts.push(head.subarray(0, 4), path, head.subarray(4, 12), data);
  }
  const raw = Buffer.concat(parts);
  const hash = createHash('sha256').update(raw).digest('hex');
  return { hash, archive: gzipSync(raw, { level: 6 }), files: entries.length, rawBytes: raw.length };
}

/** Where a head with session dir `sessionDir` unpacks package `hash` (a node, likewise). */
export function packagesDir(sessionDir: string, hash: string): string {
  return join(sessionDir, 'packages', hash);
}

/** The archive kept beside an unpacked package, as uploaded: what other nodes fetch. */
export function archivePath(packageDir: string): string {
  return `${packageDir}.tgz`;
}

/** Writes `archive` beside the unpacked `packageDir` once (atomically), unless already there. */
export function keepArchive(packageDir: string, archive: Uint8Array): void {
  const file = archivePath(packageDir);
  if (existsSync(file)) return;
  const tmp = `${file}.tmp-${process.pid}-${Date.now()}`;
  writeFileSync(tmp, archive);
  renameSync(tmp, file);
}

/** Checks a package id given over the API: 64 lowercase hex digits. */
export function isPackageHash(s: string): boolean {
  return /^[0-9a-f]{64}$/.test(s);
}

/**
 * Verifies and unpacks an uploaded archive into `destDir` (atomically: a temp dir renamed into
 * place). Rejects archives whose content hash differs from `hash` or whose paths escape.
 */
export function unpackArchive(archive: Buffer, hash: string, destDir: string, maxBytes = defaultMaxPackageBytes): void {
  const raw = gunzipSync(archive, { maxOutputLength: maxBytes + 1 });
  if (raw.length > maxBytes) throw new PackageTooLargeError(raw.length, maxBytes);
  const actual = createHash('sha256').update(raw).digest('hex');
  if (actual !== hash) throw new Error(`package content hash is ${actual}, expected ${hash}`);
  const tmp = `${destDir}.tmp-${process.pid}-${Date.now()}`;
  mkdirSync(tmp, { recursive: true });
  try {
    let at = 0;
    while (at < raw.length) {
      const pathLen = raw.readUInt32LE(at);
      const rel = raw.subarray(at + 4, at + 4 + pathLen).toString('utf8');
      at += 4 + pathLen;
      const mode = raw.readUInt32LE(at);
      const size = raw.readUInt32LE(at + 4);
      at += 8;
      const out = resolve(tmp, rel);
      if (!out.startsWith(tmp + sep)) throw new Error(`package path escapes its root: ${rel}`);
      mkdirSync(dirname(out), { recursive: true });
      writeFileSync(out, raw.subarray(at, at + size));
      chmodSync(out, mode & 0o777);
      at += size;
    }
    if (existsSync(destDir)) rmSync(tmp, { recursive: true, force: true });
    else renameSync(tmp, destDir);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
}
