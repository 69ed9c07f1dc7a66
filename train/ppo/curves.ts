/**
 * Learning curves from a run's logged metrics, as SVG (and PNG when ImageMagick's `convert` is
 * installed): reward and held-out accuracy per step. Reads the CSV that `rtjob metrics JOB --csv`
 * prints, so the picture in the README is made from what the job logged.
 *
 *   rtjob metrics JOB --plot curve.svg          (the same, from the CLI)
 *   rtjob metrics JOB --csv > run.csv
 *   node --import tsx train/ppo/curves.ts run.csv docs/learning-curve.png "title" [metric...]
 *
 * Extra metric names (e.g. `info/used_tool`, an agent's extraInfo mean; `name=label` to title
 * the line) are drawn as more lines.
 *
 * @module
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** One line of a chart. */
export interface Series {
  name: string;
  points: [number, number][];
  color: string;
  /** @default false */
  dashed?: boolean;
}

/** What {@link renderCurves} draws. */
export interface ChartSpec {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  /** @default [0, 1] widened to the data */
  yRange?: [number, number];
}

const W = 760;
const H = 420;
const M = { left: 60, right: 20, top: 40, bottom: 90 };
const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Renders line series on shared axes as a standalone SVG document. */
export function renderCurves(spec: ChartSpec): string {
  const pts = spec.series.flatMap((s) => s.points);
  const xs = pts.map((p) => p[0]);
  const ys = pts.map((p) => p[1]);
  const x0 = Math.min(0, ...xs);
  const x1 = Math.max(x0 + 1e-9, ...xs);
  const [ry0, ry1] = spec.yRange ?? [0, 1];
  // Rounded to tenths so the tick labels read well.
  const y0 = Math.floor(Math.min(ry0, ...ys) * 10) / 10;
  const y1 = Math.ceil(Math.max(ry1, ...ys) * 10) / 10;
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const sx = (x: number): number => M.left + ((x - x0) / (x1 - x0)) * pw;
  const sy = (y: number): number => M.top + ph - ((y - y0) / (y1 - y0 || 1)) * ph;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">${esc(spec.title)}</text>`,
  ];
  for (let i = 0; i <= 5; i++) {
    const y = y0 + ((y1 - y0) * i) / 5;
    out.push(
      `<line x1="${M.left}" x2="${W - M.right}" y1="${sy(y)}" y2="${sy(y)}" stroke="#ddd"/>`,
    );
    out.push(`<text x="${M.left - 6}" y="${sy(y) + 4}" text-anchor="end">${y.toFixed(2)}</text>`);
    const x = x0 + ((x1 - x0) * i) / 5;
    out.push(
      `<text x="${sx(x)}" y="${M.top + ph + 16}" text-anchor="middle">${Number(x.toFixed(1))}</text>`,
    );
  }
  out.push(
    `<rect x="${M.left}" y="${M.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`,
  );
  out.push(
    `<text x="${M.left + pw / 2}" y="${M.top + ph + 34}" text-anchor="middle">${esc(spec.xLabel)}</text>`,
  );
  out.push(
    `<text transform="translate(16 ${M.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(spec.yLabel)}</text>`,
  );
  spec.series.forEach((s, i) => {
    if (s.points.length) {
      // Separate segments rather than one path: ImageMagick's built-in SVG renderer mis-draws long paths.
      const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
      for (let k = 1; k < s.points.length; k++) {
        const [a, b] = [s.points[k - 1]!, s.points[k]!];
        out.push(
          `<line x1="${sx(a[0]).toFixed(1)}" y1="${sy(a[1]).toFixed(1)}" x2="${sx(b[0]).toFixed(1)}" y2="${sy(b[1]).toFixed(1)}" stroke="${s.color}" stroke-width="2"${dash}/>`,
        );
      }
      for (const p of s.points.length <= 30 ? s.points : [])
        out.push(`<circle cx="${sx(p[0])}" cy="${sy(p[1])}" r="2.5" fill="${s.color}"/>`);
    }
    const lx = M.left + (i % 2) * (pw / 2);
    const ly = H - 32 + Math.floor(i / 2) * 16;
    out.push(
      `<line x1="${lx}" x2="${lx + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`,
    );
    out.push(`<text x="${lx + 30}" y="${ly}">${esc(s.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n');
}

/** Writes `svg` beside `png` and converts it with ImageMagick when available; true if the PNG was made. */
export function toPng(svg: string, png: string): boolean {
  const svgPath = png.replace(/\.png$/, '') + '.svg';
  writeFileSync(svgPath, svg);
  const r = spawnSync('convert', ['-density', '110', svgPath, png], { stdio: 'ignore' });
  return r.status === 0;
}

/** Rows of `rtjob metrics --csv` (a header with `step` and one column per metric). */
export function parseMetricsCsv(text: string): Record<string, number>[] {
  const [head, ...lines] = text.trim().split('\n');
  const cols = head!.split(',').map((c) => c.trim());
  return lines.map((line) => {
    const row: Record<string, number> = {};
    line.split(',').forEach((v, i) => {
      if (v.trim() !== '' && Number.isFinite(Number(v))) row[cols[i]!] = Number(v);
    });
    return row;
  });
}

const extraColors = ['#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];

/** Reward (mean per step), held-out accuracy and any `extra` metrics against the step, from metric rows. */
export function learningSeries(rows: Record<string, number>[], extra: string[] = []): Series[] {
  const pick = (k: string): [number, number][] =>
    rows
      .filter((r) => r[k] !== undefined && r.step !== undefined)
      .map((r): [number, number] => [r.step!, r[k]!])
      .sort((a, b) => a[0] - b[0]);
  const reward = pick('reward_mean');
  // Each step sees a few new prompts, so its mean reward is noisy; the running mean shows the trend.
  const window = 5;
  const smooth = reward.map(([x], i): [number, number] => {
    const w = reward.slice(Math.max(0, i - window + 1), i + 1);
    return [x, w.reduce((a, [, y]) => a + y, 0) / w.length];
  });
  return [
    { name: 'reward (mean per step)', points: reward, color: '#9ecae1' },
    { name: `reward (running mean of ${window} steps)`, points: smooth, color: '#1f77b4' },
    { name: 'held-out accuracy (greedy)', points: pick('eval_accuracy'), color: '#d62728' },
    ...extra.map((spec, i) => {
      const [k, label] = spec.split('=', 2) as [string, string | undefined];
      return { name: label ?? k, points: pick(k), color: extraColors[i % extraColors.length]! };
    }),
  ];
}

/**
 * Draws the learning curves of a metrics CSV to `file` (`.svg`, or `.png` through ImageMagick,
 * the SVG kept beside it when `convert` is missing); returns what it wrote, as one line.
 */
export function writeCurves(
  csv: string,
  file: string,
  title: string,
  extra: string[] = [],
): string {
  const svg = renderCurves({
    title,
    xLabel: 'step',
    yLabel: 'reward / accuracy',
    series: learningSeries(parseMetricsCsv(csv), extra),
  });
  if (!file.endsWith('.png')) {
    writeFileSync(file, svg);
    return `wrote ${file}`;
  }
  return toPng(svg, file)
    ? `wrote ${file}`
    : `wrote ${file.replace(/\.png$/, '.svg')} (no ImageMagick for the PNG)`;
}

const isMain = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1];
if (isMain) {
  const [csv, png, title, ...extra] = process.argv.slice(2);
  if (!csv || !png) {
    process.stderr.write('usage: curves.ts METRICS.csv OUT.png [title] [metric...]\n');
    process.exit(2);
  }
  process.stdout.write(
    `${writeCurves(readFileSync(csv, 'utf8'), png, title ?? 'train_ppo', extra)}\n`,
  );
}
