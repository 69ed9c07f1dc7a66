/**
 * Working-dir packages: the client packs a directory (without `node_modules`, `.git` and the
 * patterns of its `.rtjobignore`, gitignore syntax via the `ignore` package) into a gzip'd tar
 * archive named by the sha256 of the uncompressed tar; the head stores it once per hash and
 * unpacks it once per hash for every job that uses it, and nodes fetch and unpack it the same way.
 *
 * The tar is reproducible so that equal trees hash equal: regular files only, sorted by path,
 * no mtime, no owner (`portable`), permission bits as they are. Unpacking restores those bits
 * exactly, so packing an unpacked package again gives the same hash (the head relies on it to
 * serve a package whose archive it no longer has).
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import {
  createReadStream,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, gzipSync } from 'node:zlib';
import ignore from 'ignore';
import * as tar from 'tar';
import { RtjobError } from '../errors.ts';

/** Largest package the head accepts, compressed. @default 100 MiB */
export const defaultMaxPackageBytes = 100 * 1024 * 1024;

/** Names never packed, wherever they appear. */
const alwaysIgnored = new Set(['node_modules', '.git']);

/** Thrown when a directory is larger than allowed; `code` for checks across boundaries. */
export class PackageTooLargeError extends RtjobError<'PACKAGE_TOO_LARGE'> {
  override get name(): string {
    return 'PackageTooLargeError';
  }

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

/** An archive that is not the package it claims to be: another hash, or an entry rtjob refuses. */
export class BadPackageError extends RtjobError<'BAD_PACKAGE'> {
  override get name(): string {
    return 'BadPackageError';
  }

  constructor(message: string) {
    super('BAD_PACKAGE', message);
  }
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
  const ignored = ignore().add(existsSync(ignoreFile) ? readFileSync(ignoreFile, 'utf8') : '');
  const files: string[] = [];
  let total = 0;
  const walk = (abs: string) => {
    for (const name of readdirSync(abs)) {
      if (alwaysIgnored.has(name)) continue;
      const child = join(abs, name);
      const rel = relative(root, child).split(sep).join('/');
      const st = lstatSync(child);
      if (st.isSymbolicLink()) continue;
      if (ignored.ignores(st.isDirectory() ? `${rel}/` : rel)) continue;
      if (st.isDirectory()) walk(child);
      else if (st.isFile()) {
        total += st.size;
        if (total > maxBytes) throw new PackageTooLargeError(total, maxBytes);
        files.push(rel);
      }
    }
  };
  walk(root);
  files.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const chunks: Buffer[] = [];
  // sync: the archive is complete when create() returns; noMtime and portable keep it reproducible.
  tar
    .create(
      { cwd: root, sync: true, portable: true, noMtime: true, noDirRecurse: true, strict: true },
      files,
    )
    .on('data', (c: Buffer) => chunks.push(c));
  const raw = Buffer.concat(chunks);
  const hash = createHash('sha256').update(raw).digest('hex');
  return { hash, archive: gzipSync(raw, { level: 6 }), files: files.length, rawBytes: raw.length };
}

/** Where a head with session dir `sessionDir` unpacks package `hash` (a node, likewise). */
export function packagesDir(sessionDir: string, hash: string): string {
  return join(sessionDir, 'packages', hash);
}

/** The archive kept beside an unpacked package, as uploaded: what other nodes fetch. */
export function archivePath(packageDir: string): string {
  return `${packageDir}.tgz`;
}

/**
 * Keeps `archive` (the bytes, or a file that is moved) beside the unpacked `packageDir` once
 * (atomically), unless already there.
 */
export function keepArchive(packageDir: string, archive: Uint8Array | string): void {
  const file = archivePath(packageDir);
  if (existsSync(file)) return;
  if (typeof archive === 'string') return renameSync(archive, file);
  const tmp = `${file}.tmp-${process.pid}-${Date.now()}`;
  writeFileSync(tmp, archive);
  renameSync(tmp, file);
}

/** Checks a package id given over the API: 64 lowercase hex digits. */
export function isPackageHash(s: string): boolean {
  return /^[0-9a-f]{64}$/.test(s);
}

/**
 * Verifies and unpacks an uploaded archive (a file path or the bytes) into `destDir` (atomically:
 * a temp dir renamed into place). The archive is inflated as a stream straight into the tar
 * reader, so memory stays a few chunks whatever the archive holds; past `maxBytes` inflated bytes
 * it stops at once with {@link PackageTooLargeError} (a gzip bomb costs the chunks read so far,
 * not its size). Rejects archives whose content hash differs from `hash`, and any entry that is
 * not a plain file or directory or whose path escapes `destDir` ({@link BadPackageError}).
 */
export async function unpackArchive(
  archive: string | Uint8Array,
  hash: string,
  destDir: string,
  maxBytes = defaultMaxPackageBytes,
): Promise<void> {
  const tmp = `${destDir}.tmp-${process.pid}-${Date.now()}`;
  mkdirSync(tmp, { recursive: true });
  try {
    let refused: string | undefined;
    const unpack = new tar.Unpack({
      cwd: tmp,
      strict: true,
      // Exactly the packed permission bits, whatever this process's umask, so a re-pack hashes equal.
      chmod: true,
      processUmask: 0,
      filter: (path, entry) => {
        const type = 'type' in entry ? entry.type : undefined;
        const ok =
          (type === 'File' || type === 'Directory') &&
          !path.split('/').includes('..') &&
          !path.startsWith('/');
        if (!ok) refused ??= `${type ?? 'entry'} ${path}`;
        return ok;
      },
    });
    const unpacked = new Promise<void>((res, rej) => {
      unpack.once('end', res);
      unpack.once('error', rej);
    });
    unpacked.catch(() => {}); // awaited below; a failure before then is not unhandled
    let sawEnd = false;
    unpack.once('eof', () => (sawEnd = true));
    const sha = createHash('sha256');
    let inflated = 0;
    const source =
      typeof archive === 'string' ? createReadStream(archive) : Readable.from([archive]);
    let tooLarge: PackageTooLargeError | undefined;
    await pipeline(source, createGunzip(), async (raw: AsyncIterable<Buffer>) => {
      for await (const chunk of raw) {
        inflated += chunk.length;
        if (inflated > maxBytes) {
          tooLarge = new PackageTooLargeError(inflated, maxBytes);
          unpack.abort(tooLarge);
          throw tooLarge;
        }
        sha.update(chunk);
        // Past the archive's end the reader would only buffer: what follows is hashed, not read.
        if (sawEnd) continue;
        // An aborted or finished reader never drains: its outcome ends the wait then.
        if (!unpack.write(chunk)) await Promise.race([once(unpack, 'drain'), unpacked]);
      }
      unpack.end();
    }).catch((e: unknown) => {
      throw tooLarge ?? e; // not the AbortError the pipeline's teardown reports
    });
    await unpacked;
    const actual = sha.digest('hex');
    if (actual !== hash)
      throw new BadPackageError(`package content hash is ${actual}, expected ${hash}`);
    if (refused !== undefined)
      throw new BadPackageError(`package holds an entry rtjob does not unpack: ${refused}`);
    if (existsSync(destDir)) rmSync(tmp, { recursive: true, force: true });
    else renameSync(tmp, destDir);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
}
