/**
 * A job's ledger in the session database: one entry per thing the job accounts for (train_ppo:
 * one per episode), each with an `id`, a `status` and any other fields, stored as the job last
 * sent it. A job sends entries as they change (`metrics.ledger`); the newest state of an entry
 * replaces the older one, and entries keep the order in which they first arrived. What the
 * ledger's verdict is, the job says in its report (`ledger: { verdict, ok, noun }`).
 *
 * @module
 */
import type Database from 'better-sqlite3';
import { OpsError } from './errors.ts';

/** One entry of a job's ledger: any JSON fields with an `id` and a `status`. */
export interface LedgerEntryRecord {
  id: string;
  status: string;
  [field: string]: unknown;
}

/** How much of a ledger one request may send, and one entry may hold. */
export const ledgerLimits = { maxPerRequest: 2000, maxEntryBytes: 4096 };

/** The ledger table of an ops database (`ops_job_ledger`, made by the ops store's schema). */
export class LedgerStore {
  readonly #upsert: Database.Statement;
  readonly #next: Database.Statement;
  readonly #all: Database.Statement;

  constructor(readonly db: Database.Database) {
    this.#upsert = db.prepare(
      `INSERT INTO ops_job_ledger (job_id, entry_id, seq, status, data) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT(job_id, entry_id) DO UPDATE SET status = excluded.status, data = excluded.data`,
    );
    this.#next = db.prepare(
      'SELECT COALESCE(MAX(seq), -1) + 1 AS n FROM ops_job_ledger WHERE job_id = ?',
    );
    this.#all = db.prepare(
      'SELECT data FROM ops_job_ledger WHERE job_id = ? ORDER BY seq LIMIT ? OFFSET ?',
    );
  }

  /** Stores `entries` (new ones appended, known ones replaced); throws `BAD_REQUEST` on one too large. */
  add(jobId: string, entries: readonly LedgerEntryRecord[]): number {
    const rows = entries.map((e) => {
      const data = JSON.stringify(e);
      if (Buffer.byteLength(data) > ledgerLimits.maxEntryBytes)
        throw new OpsError(
          'BAD_REQUEST',
          `ledger entry ${e.id} is over ${ledgerLimits.maxEntryBytes} bytes of JSON`,
        );
      return { id: String(e.id), status: String(e.status), data };
    });
    this.db.transaction(() => {
      let seq = (this.#next.get(jobId) as { n: number }).n;
      for (const r of rows) this.#upsert.run(jobId, r.id, seq++, r.status, r.data);
    })();
    return rows.length;
  }

  /** The job's entries in the order they first arrived (`offset`, at most `limit`). */
  list(jobId: string, q: { offset?: number; limit?: number } = {}): LedgerEntryRecord[] {
    const rows = this.#all.all(jobId, q.limit ?? -1, q.offset ?? 0) as { data: string }[];
    return rows.map((r) => JSON.parse(r.data) as LedgerEntryRecord);
  }
}
