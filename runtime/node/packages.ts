/**
 * Working-dir packages on one node: a job's uploaded working dir (`pkg://<hash>`) is fetched from
 * the head once per node, unpacked under the session dir by content hash, and shared by every
 * worker of the job on the node.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { defaultMaxPackageBytes, packagesDir, unpackArchive } from '../packages/working-dir.ts';
import { needsDependencies, provideDependencies } from '../packages/package-deps.ts';
import { logger } from '../log.ts';

const log = logger('node');

/** The node's copies of working-dir packages, by content hash. */
export class NodePackages {
  private readonly unpacked = new Map<string, Promise<string>>();

  constructor(
    private readonly sessionDir: string,
    /** Fetches a package's archive from the head. */
    private readonly fetch: (hash: string) => Promise<Uint8Array>,
  ) {}

  /**
   * This node's copy of a working-dir package, fetched and unpacked once, with its npm
   * dependencies (`package-deps.ts`; linked to the submitter's `node_modules` on its machine).
   */
  local(hash: string, submitterNodeModules?: string): Promise<string> {
    let p = this.unpacked.get(hash);
    if (!p) {
      p = (async () => {
        const dir = packagesDir(this.sessionDir, hash);
        if (!existsSync(dir)) await this.unpack(hash, dir);
        if (needsDependencies(dir))
          await provideDependencies(dir, {
            ...(submitterNodeModules ? { submitterNodeModules } : {}),
            log: (line) => log.info(line),
          });
        return dir;
      })();
      this.unpacked.set(hash, p);
      p.catch(() => this.unpacked.delete(hash));
    }
    return p;
  }

  private async unpack(hash: string, dir: string): Promise<void> {
    const archive = await this.fetch(hash);
    await unpackArchive(
      Buffer.from(archive.buffer, archive.byteOffset, archive.byteLength),
      hash,
      dir,
      defaultMaxPackageBytes * 4,
    );
    log.info(`unpacked working dir ${hash.slice(0, 12)} (${archive.byteLength} bytes) into ${dir}`);
  }
}
