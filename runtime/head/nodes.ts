/**
 * Node agents at the head: registration (fresh, or again after a head restart with the workers
 * the node still runs), a node's death (its bundles and actors move elsewhere), and the node's
 * own requests (worker exits, shipped logs, working-dir archives, usage samples).
 *
 * @module
 */
import { existsSync, readFileSync } from 'node:fs';
import { InvalidArgumentError, NotFoundError } from '../errors.ts';
import { logger } from '../log.ts';
import type { NodeInfo, NodeStats, RegisterNode } from '../protocol.ts';
import type { Connection } from '../transport.ts';
import type { ActorTable } from './actors.ts';
import { archivePath, isPackageHash, packDir, packagesDir } from '../packages/working-dir.ts';
import type { PlacementGroups } from './placement-groups.ts';
import type { Recovery } from './recovery.ts';
import { ResourcePool } from './resources.ts';
import type { SchedNode } from './scheduler.ts';
import { type HeadContext, type Mutable, newId } from './state.ts';

const log = logger('head');

/** The head's node agents. */
export class NodeRegistry {
  constructor(
    private readonly ctx: HeadContext,
    private readonly actors: ActorTable,
    private readonly pgs: PlacementGroups,
    private readonly recovery: Recovery,
  ) {}

  list(): NodeInfo[] {
    return [...this.ctx.nodes.values()].map((n) => ({
      ...n.info,
      available: { ...n.sched.pool.available },
      ...(n.usage && n.info.state === 'ALIVE' ? { usage: n.usage } : {}),
    }));
  }

  /** Keeps a node's latest usage sample (`nodeStats`) for the API to show. */
  stats(msg: NodeStats, conn: Connection): void {
    const node = this.ctx.nodes.get(conn.meta.nodeId as string);
    if (!node || node.conn !== conn) return;
    const { type: _, ...usage } = msg;
    node.usage = { ...usage, sampledAtMs: Date.now() };
  }

  register(msg: RegisterNode, conn: Connection): { nodeId: string } {
    if (conn.meta.role !== undefined)
      throw new InvalidArgumentError('this connection is already registered');
    const nodeId =
      msg.nodeId && !this.ctx.nodes.get(msg.nodeId)?.sched.alive ? msg.nodeId : newId('node_');
    const gpus = Math.floor(msg.resources.GPU ?? 0);
    const pool = new ResourcePool(msg.resources, [...Array(gpus).keys()]);
    const sched: SchedNode = { nodeId, pool, alive: true, actorCount: 0 };
    const info: Mutable<NodeInfo> = {
      nodeId,
      hostname: msg.hostname,
      host: msg.host,
      pid: msg.pid,
      state: 'ALIVE',
      total: { ...msg.resources },
      available: pool.available,
      sessionDir: msg.sessionDir,
      startedAtMs: Date.now(),
    };
    // Stored first: a write that fails leaves nothing half-registered in memory.
    this.ctx.store.putNode(info);
    this.ctx.nodes.set(nodeId, { info, conn, sched });
    conn.meta = { role: 'node', nodeId };
    conn.allowBulk();
    conn.setHeartbeatTimeout(this.ctx.opts.nodeHeartbeatTimeoutMs);
    conn.onClose((reason) => this.gone(nodeId, reason));
    this.recovery.restoreBundles(nodeId);
    this.recovery.reattachWorkers(nodeId, msg.workers, conn);
    this.ctx.events.emit('node', { ...info, available: { ...pool.available } });
    log.info(`node ${nodeId} joined from ${conn.peer}`);
    this.ctx.schedulePump();
    return { nodeId };
  }

  private gone(nodeId: string, reason: string): void {
    const node = this.ctx.nodes.get(nodeId);
    if (!node || !node.sched.alive) return;
    node.sched.alive = false;
    node.info.state = 'DEAD';
    // A head shutting down leaves nodes and workers as they are: a head started again on the
    // session re-attaches them (and a stopWorker sent now would still go out with the close).
    if (this.ctx.closing) return;
    this.ctx.store.putNode(node.info);
    this.ctx.events.emit('node', { ...node.info });
    log.warn(`node ${nodeId} is dead: ${reason}`);
    // Bundles first, so actors restarting below wait for their bundle's new home.
    this.pgs.nodeLost(node.sched);
    for (const rec of this.ctx.actors.values()) {
      if (rec.alloc?.node !== node.sched || rec.info.state === 'DEAD') continue;
      rec.alloc = undefined; // its pool is gone with the node
      this.actors.processGone(rec, {
        reason: 'node-died',
        message: `node ${nodeId} died: ${reason}`,
      });
    }
  }

  /**
   * The archive of an uploaded working dir, as uploaded; a package unpacked by an older head
   * (which kept no archive) is packed again from its directory.
   */
  packageArchive(hash: string): Uint8Array {
    if (typeof hash !== 'string' || !isPackageHash(hash))
      throw new InvalidArgumentError('package id must be a sha256 hex digest');
    const dir = this.ctx.sessionDir ? packagesDir(this.ctx.sessionDir, hash) : undefined;
    if (!dir || !existsSync(dir))
      throw new NotFoundError(`package ${hash} was not uploaded to this head`);
    try {
      return readFileSync(archivePath(dir));
    } catch {
      const packed = packDir(dir);
      if (packed.hash !== hash)
        throw new NotFoundError(`package ${hash} changed on the head since it was uploaded`);
      return packed.archive;
    }
  }
}
