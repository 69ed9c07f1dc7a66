/**
 * `npm run chaos`: every scenario of the chaos suite at full length, a table of counts in the
 * bench README's style, and exit 1 on any loss, hang, zombie execution, reordering, duplicate
 * at-most-once call, or a scenario that could not run here (a missing capability is a failure,
 * never a pass). `CHAOS_SECONDS` scales the run (default 30 per scenario).
 */
import { headRestarts, linkCut, nodeKills, report, violations, workerKills } from './harness.ts';

const seconds = Number(process.env.CHAOS_SECONDS ?? 30);
const results = [];
results.push(await workerKills(seconds, 1000, 6));
results.push(await nodeKills(seconds));
results.push(await headRestarts(seconds));
results.push(await linkCut(Math.max(seconds, 60), 20));
console.log(report(results));
const bad = results.filter((r) => violations(r).length > 0);
console.log(
  bad.length === 0 ? 'chaos: every scenario held' : `chaos: ${bad.length} scenario(s) failed`,
);
process.exit(bad.length === 0 ? 0 : 1);
