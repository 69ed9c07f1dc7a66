/**
 * The head's durable state in SQLite (better-sqlite3, WAL): nodes, actors, placement groups and a
 * key-value table. This is the only module that writes SQL; other head modules call its methods.
 * Other parts may add their own tables through `db` (see `ops/README.md`).
 *
 * @module
 */
import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { ActorInfo, NodeInfo, PlacementGroupInfo } from '../protocol.ts';

/** Options for `openStore`. */
export interface StoreOptions {
  /** Directory that holds `head.sqlite`; omitted means an in-memory database. */
  sessionDir?: string;
}

const schema = `
CREATE TABLE IF NOT EXISTS nodes (
  node_id TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  info TEXT NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS actors (
  actor_id TEXT PRIMARY KEY,
  name TEXT,
  state TEXT NOT NULL,
  job_id TEXT,
  node_id TEXT,
  info TEXT NOT NULL,
  ctor_args BLOB,
  updated_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS actors_state ON actors(state);
CREATE INDEX IF NOT EXISTS actors_job ON actors(job_id);
CREATE TABLE IF NOT EXISTS placement_groups (
  pg_id TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  info TEXT NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
  key TEXT PRIMARY KEY,
  value BLOB NOT NULL
);
`;

/** The head's tables. Rows hold the full info as JSON plus the columns worth filtering on. */
export class HeadStore {
  /** The open database, for other head modules that add their own tables. */
  readonly db: Database.Database;
  private readonly stmts;

  constructor(opts: StoreOptions = {}) {
    let file = ':memory:';
    if (opts.sessionDir) {
      mkdirSync(opts.sessionDir, { recursive: true });
      file = join(opts.sessionDir, 'head.sqlite');
    }
    this.db = new Database(file);
    if (file !== ':memory:') {
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = NORMAL');
    }
    this.db.exec(schema);
    this.stmts = {
      putNode: this.db.prepare(
        'INSERT INTO nodes (node_id, state, info, updated_at_ms) VALUES (?, ?, ?, ?) ' +
          'ON CONFLICT(node_id) DO UPDATE SET state = excluded.state, info = excluded.info, updated_at_ms = excluded.updated_at_ms',
      ),
      putActor: this.db.prepare(
        'INSERT INTO actors (actor_id, name, state, job_id, node_id, info, ctor_args, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ' +
          'ON CONFLICT(actor_id) DO UPDATE SET name = excluded.name, state = excluded.state, job_id = excluded.job_id, ' +
          'node_id = excluded.node_id, info = excluded.info, updated_at_ms = excluded.updated_at_ms',
      ),
      putPg: this.db.prepare(
        'INSERT INTO placement_groups (pg_id, state, info, updated_at_ms) VALUES (?, ?, ?, ?) ' +
          'ON CONFLICT(pg_id) DO UPDATE SET state = excluded.state, info = excluded.info, updated_at_ms = excluded.updated_at_ms',
      ),
      ctorArgs: this.db.prepare('SELECT ctor_args FROM actors WHERE actor_id = ?'),
      deleteActor: this.db.prepare('DELETE FROM actors WHERE actor_id = ?'),
      actors: this.db.prepare('SELECT info FROM actors ORDER BY rowid'),
      nodes: this.db.prepare('SELECT info FROM nodes ORDER BY rowid'),
      pgs: this.db.prepare('SELECT info FROM placement_groups ORDER BY rowid'),
      kvPut: this.db.prepare(
        'INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value',
      ),
      kvGet: this.db.prepare('SELECT value FROM kv WHERE key = ?'),
      kvDelete: this.db.prepare('DELETE FROM kv WHERE key = ?'),
      kvKeys: this.db.prepare("SELECT key FROM kv WHERE key LIKE ? ESCAPE '\\' ORDER BY key"),
    };
  }

  putNode(n: NodeInfo): void {
    this.stmts.putNode.run(n.nodeId, n.state, JSON.stringify(n), Date.now());
  }

  /** Writes an actor; `ctorArgs` is written only when given (it never changes). */
  putActor(a: ActorInfo, ctorArgs?: Uint8Array): void {
    this.stmts.putActor.run(
      a.actorId,
      a.name ?? null,
      a.state,
      a.options.jobId ?? null,
      a.nodeId ?? null,
      JSON.stringify(a),
      ctorArgs ? Buffer.from(ctorArgs.buffer, ctorArgs.byteOffset, ctorArgs.byteLength) : null,
      Date.now(),
    );
  }

  /** Forgets an actor (a dead one past its retention). */
  deleteActor(actorId: string): void {
    this.stmts.deleteActor.run(actorId);
  }

  putPlacementGroup(pg: PlacementGroupInfo): void {
    this.stmts.putPg.run(pg.pgId, pg.state, JSON.stringify(pg), Date.now());
  }

  actorCtorArgs(actorId: string): Uint8Array | undefined {
    const row = this.stmts.ctorArgs.get(actorId) as { ctor_args: Buffer | null } | undefined;
    return row?.ctor_args ?? undefined;
  }

  listActors(): ActorInfo[] {
    return (this.stmts.actors.all() as { info: string }[]).map((r) => JSON.parse(r.info));
  }

  listNodes(): NodeInfo[] {
    return (this.stmts.nodes.all() as { info: string }[]).map((r) => JSON.parse(r.info));
  }

  listPlacementGroups(): PlacementGroupInfo[] {
    return (this.stmts.pgs.all() as { info: string }[]).map((r) => JSON.parse(r.info));
  }

  kvPut(key: string, value: Uint8Array): void {
    this.stmts.kvPut.run(key, Buffer.from(value.buffer, value.byteOffset, value.byteLength));
  }

  kvGet(key: string): Uint8Array | undefined {
    const row = this.stmts.kvGet.get(key) as { value: Buffer } | undefined;
    return row?.value;
  }

  kvDelete(key: string): void {
    this.stmts.kvDelete.run(key);
  }

  /** Keys that start with `prefix`, sorted. */
  kvKeys(prefix = ''): string[] {
    const like = prefix.replace(/[\\%_]/g, (c) => `\\${c}`) + '%';
    return (this.stmts.kvKeys.all(like) as { key: string }[]).map((r) => r.key);
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
