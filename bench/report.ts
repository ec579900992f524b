/**
 * The bench's output: the figures with their references and targets, as a table (stdout and
 * bench/RESULTS.md) and as bench/results.json.
 */

export interface Target {
  figure: string;
  goal: string;
  value: number | null;
  met: boolean | null;
}

export interface Results {
  // The figures of B1–B6 (numbers; passthrough_rps_nginx null when skipped).
  bandwidth_ratio_full_modern: number;
  bandwidth_ratio_full_legacy: number;
  upstream_fetch_reduction: number;
  presence_p50_ms_shim: number;
  presence_p50_ms_direct: number;
  passthrough_rps_shim: number;
  passthrough_rps_direct: number;
  passthrough_rps_nginx: number | null;
  ledger_bytes_per_user: number;
  rss_ratio_1000_vs_1_callers: number;
  max_event_loop_block_ms: number;
  // More figures from the same run.
  bandwidth_ratio_full_modern_gzip: number;
  bandwidth_ratio_full_legacy_gzip: number;
  presence_p99_ms_shim: number;
  presence_p99_ms_direct: number;
  passthrough_p99_ms_shim: number;
  passthrough_p99_ms_direct: number;
  passthrough_p99_ms_nginx: number | null;
  upstream_full_fetches_per_min_shim: number;
  upstream_full_fetches_per_min_direct: number;
  upstream_full_fetches_per_min_shim_compressed: number;
  upstream_full_fetches_per_min_shim_real_time: number | null;
  upstream_fetch_reduction_compressed: number;
  max_event_loop_block_cpu_ms: number;
  /** B4's references beside nginx: the bare undici pass-through, and nginx with the shim's locations. */
  passthrough_rps_bare_undici: number | null;
  passthrough_p99_ms_bare_undici: number | null;
  passthrough_rps_production_path: number | null;
  passthrough_p99_ms_production_path: number | null;
  machine: { cpu: string; cores: number; memoryGiB: number; loadavgStart: number[]; loadavgEnd: number[] };
  node: string;
  date: string;
  commit: string;
  options: Record<string, unknown>;
  targets: Target[];
  details: Record<string, unknown>;
}

const fmt = (v: number | null | undefined, digits = 1): string => {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString('en-US');
  return v.toFixed(digits).replace(/\.0+$/, '');
};
const bytes = (v: number) => (v >= 10_000 ? `${fmt(v / 1024)} KiB` : `${fmt(v, 0)} B`);
const met = (m: boolean | null) => (m === null ? 'not measured' : m ? 'yes' : '**no**');

/** The results table (Markdown, also readable as plain text). */
export function renderTable(r: Results): string {
  const d = r.details as Record<string, Record<string, number | string | null>>;
  const b1 = d.b1!;
  const b2 = d.b2!;
  const b4 = d.b4!;
  const b5 = d.b5!;
  const b6 = d.b6!;
  const t = (fig: string) => r.targets.find((x) => x.figure === fig)!;
  const rows: string[][] = [
    ['figure', 'shim', 'reference (same run)', 'ratio', 'target', 'met'],
    [
      'B1 bytes per poll, steady state',
      `delta ${bytes(b1.deltaBytes as number)}`,
      `full modern ${bytes(b1.fullModernBytes as number)}; full legacy ${bytes(b1.fullLegacyBytes as number)}`,
      `${fmt(r.bandwidth_ratio_full_modern)}× / ${fmt(r.bandwidth_ratio_full_legacy)}×`,
      t('B1').goal,
      met(t('B1').met),
    ],
    [
      'B1 same, gzip (zlib level 6)',
      `delta ${bytes(b1.deltaGzipBytes as number)}`,
      `full modern ${bytes(b1.fullModernGzipBytes as number)}; full legacy ${bytes(b1.fullLegacyGzipBytes as number)}`,
      `${fmt(r.bandwidth_ratio_full_modern_gzip)}× / ${fmt(r.bandwidth_ratio_full_legacy_gzip)}×`,
      '–',
      '–',
    ],
    ((a) => [
      'B1 same, every client reporting active (P15)',
      `delta ${bytes(a.deltaBytes)}, ${fmt(a.entriesPerDelta, 0)} users`,
      `full modern ${bytes(b1.fullModernBytes as number)}`,
      `${fmt(a.ratioFullModern)}×`,
      '– (churn above 2 %)',
      '–',
    ])(b1.activeClients as unknown as { deltaBytes: number; entriesPerDelta: number; ratioFullModern: number }),
    [
      `B2 full presence fetches upstream per minute, ${b2.clients} clients`,
      r.upstream_full_fetches_per_min_shim_real_time === null
        ? `${fmt(r.upstream_full_fetches_per_min_shim)}/min (+ ${fmt(b2.pingsPerMinute as number, 0)} pings/min)`
        : `${fmt(r.upstream_full_fetches_per_min_shim_real_time)}/min real time; ${fmt(r.upstream_full_fetches_per_min_shim_compressed)}/min time-compressed (${fmt(
            r.upstream_fetch_reduction_compressed,
          )}×) (+ ${fmt(b2.pingsPerMinute as number, 0)} pings/min)`,
      `${fmt(r.upstream_full_fetches_per_min_direct)}/min without the shim`,
      `${fmt(r.upstream_fetch_reduction)}× fewer`,
      t('B2').goal,
      met(t('B2').met),
    ],
    [
      `B3 presence poll p50 / p99, ${d.b3!.users} users`,
      `delta ${fmt(r.presence_p50_ms_shim, 2)} / ${fmt(r.presence_p99_ms_shim, 2)} ms`,
      `direct full ${fmt(r.presence_p50_ms_direct, 2)} / ${fmt(r.presence_p99_ms_direct, 2)} ms`,
      `${fmt(r.presence_p50_ms_direct / r.presence_p50_ms_shim)}× faster p50`,
      t('B3').goal,
      met(t('B3').met),
    ],
    [
      `B4 pass-through, small JSON, ${b4.connections} connections`,
      `${fmt(r.passthrough_rps_shim, 0)} req/s, p99 ${fmt(r.passthrough_p99_ms_shim)} ms`,
      `bare undici ${fmt(r.passthrough_rps_bare_undici, 0)} req/s, p99 ${fmt(r.passthrough_p99_ms_bare_undici)} ms; nginx ${
        r.passthrough_rps_nginx === null
          ? `skipped (${b4.nginxSkipped})`
          : `${fmt(r.passthrough_rps_nginx, 0)} req/s, p99 ${fmt(r.passthrough_p99_ms_nginx)} ms`
      }; direct ${fmt(r.passthrough_rps_direct, 0)} req/s`,
      [
        r.passthrough_rps_bare_undici === null ? '' : `${fmt(r.passthrough_rps_shim / r.passthrough_rps_bare_undici, 2)}× bare`,
        r.passthrough_rps_nginx === null
          ? ''
          : `${fmt(r.passthrough_rps_shim / r.passthrough_rps_nginx, 2)}× nginx, p99 ${fmt(r.passthrough_p99_ms_shim / r.passthrough_p99_ms_nginx!, 2)}× nginx's`,
      ]
        .filter(Boolean)
        .join('; ') || '–',
      t('B4').goal,
      met(t('B4').met),
    ],
    [
      "B4 production path: nginx with the shim's locations, passed-through GET",
      r.passthrough_rps_production_path === null
        ? 'not measured'
        : `${fmt(r.passthrough_rps_production_path, 0)} req/s, p99 ${fmt(r.passthrough_p99_ms_production_path)} ms`,
      r.passthrough_rps_nginx === null ? `nginx skipped (${b4.nginxSkipped})` : 'the same nginx without the locations',
      r.passthrough_rps_production_path === null || r.passthrough_rps_nginx === null
        ? '–'
        : `${fmt(r.passthrough_rps_production_path / r.passthrough_rps_nginx, 2)}× nginx`,
      t('B4 production path').goal,
      met(t('B4 production path').met),
    ],
    [
      'B5 ledger heap per user',
      `${fmt(r.ledger_bytes_per_user, 0)} B`,
      `${fmt(b5.ledgerBytes as number, 0)} B for ${b5.users} users`,
      '–',
      t('B5 ledger').goal,
      met(t('B5 ledger').met),
    ],
    [
      'B5 shim RSS, 1,000 vs 1 callers',
      `${fmt((b5.rss1000 as number) / 2 ** 20)} MiB`,
      `${fmt((b5.rss1 as number) / 2 ** 20)} MiB with 1 caller`,
      `${fmt(r.rss_ratio_1000_vs_1_callers, 3)}×`,
      t('B5 RSS').goal,
      met(t('B5 RSS').met),
    ],
    [
      'B6 longest event-loop block',
      `${fmt(r.max_event_loop_block_ms)} ms`,
      `delta polls only ${fmt(b6.deltaOnlyMaxMs as number)} ms; mixed ${fmt(b6.mixedMaxMs as number)} ms`,
      '–',
      t('B6').goal,
      met(t('B6').met),
    ],
    [
      'B6 longest block, main-thread CPU only',
      `${fmt(r.max_event_loop_block_cpu_ms)} ms`,
      'the wall time above also holds waits for a core on this shared machine',
      '–',
      t('B6 CPU').goal,
      met(t('B6 CPU').met),
    ],
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  const line = (row: string[]) => `| ${row.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(rows[0]!), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(line)].join('\n');
}

export function renderCosts(r: Results): string {
  const d = r.details as Record<string, Record<string, number | string | null>>;
  const b2 = d.b2!;
  const b3 = d.b3!;
  const b6 = d.b6!;
  const lines = [
    `- Shim CPU in B2 steady state: ${fmt(b2.shimCpuMsPerPoll as number, 2)} ms per poll (${fmt(b2.shimCpuPct as number)} % of one core at ${fmt(b2.pollsPerSecond as number, 0)} polls/s, time-compressed), upstream ${fmt(b2.upstreamCpuPct as number)} %.`,
    `- B2 poll latency through the shim (paced clients): p50 ${fmt(b2.p50 as number, 2)} ms, p99 ${fmt(b2.p99 as number, 2)} ms.`,
    `- B3 throughput at ${b3.connections} connections: shim ${fmt(b3.shimRps as number, 0)} delta polls/s (mean answer ${bytes(b3.shimMeanBytes as number)}), direct ${fmt(b3.directRps as number, 0)} full polls/s (${bytes(b3.directMeanBytes as number)}).`,
    `- B6 mixed traffic (8 delta : 1 full modern : 1 legacy): p50 ${fmt(b6.mixedP50 as number, 2)} ms, p99 ${fmt(b6.mixedP99 as number, 2)} ms, ${fmt(b6.mixedRps as number, 0)} polls/s; event-loop delay p99 ${fmt(b6.mixedEldP99Ms as number, 2)} ms.`,
    `- Heap held by one realm of ${d.b5!.users} users in the shim (ledger, snapshot, user list, cached answers): ${fmt((d.b5!.realmHeapBytes as number) / 2 ** 20, 1)} MiB.`,
  ];
  return lines.join('\n');
}

/** What the figures mean where a target is missed or the machine gets in the way. */
export function renderNotes(r: Results): string {
  const d = r.details as Record<string, Record<string, unknown>>;
  const o = r.options as { coalesceMs: number; clients: number };
  const b6 = d.b6 as { deltaOnly?: { maxGapMs: number; cpuInMaxGapMs: number; maxCpuInGapMs: number; gapOfMaxCpuMs: number } };
  const bound = 60_000 / o.coalesceMs;
  const notes = [
    `- B2: one full fetch per realm per coalesceMs (${o.coalesceMs} ms) means at most ${fmt(bound)} per minute, a little fewer since each fetch's own duration adds to its window; with ${fmt(
      o.clients,
      0,
    )} clients polling once a minute that caps the reduction near ${fmt(o.clients / bound)}×, whatever the shim does. ${
      o.clients / bound < 100
        ? `100× needs coalesceMs ≥ ${fmt(6_000_000 / o.clients, 0)} at this client count, or more clients per realm.`
        : ''
    } Every poll's own status report still reaches the upstream as a ping_only call (P9).`,
  ];
  if (b6.deltaOnly) {
    notes.push(
      `- B6: the event-loop delay is wall time. In the delta phase the longest gap between two 1 ms ticks lasted ${fmt(b6.deltaOnly.maxGapMs)} ms, of which the shim's main thread ran ${fmt(
        b6.deltaOnly.cpuInMaxGapMs,
      )} ms (the rest it waited for a core); the gap in which it ran longest held ${fmt(b6.deltaOnly.maxCpuInGapMs)} ms of CPU in ${fmt(b6.deltaOnly.gapOfMaxCpuMs)} ms of wall time.`,
    );
  }
  return notes.join('\n');
}

export function renderMarkdown(r: Results, command: string): string {
  const o = r.options;
  return `# Benchmark results

Latest \`npm run bench\` on this repository's machine. Reproduce with \`${command}\`
(options: \`--users N\`, \`--quick\`, \`--no-nginx\`, \`--clients N\`, \`--churn F\`, \`--phase-seconds S\`,
\`--rss-polls N\`, \`--profile DIR\`; see \`bench/run.ts\`).

- Date: ${r.date}; commit ${r.commit}
- Machine: ${r.machine.cpu}, ${r.machine.cores} cores, ${fmt(r.machine.memoryGiB)} GiB; Node ${r.node}
- Load average at start ${r.machine.loadavgStart.map((x) => x.toFixed(2)).join(' / ')}, at end ${r.machine.loadavgEnd
    .map((x) => x.toFixed(2))
    .join(' / ')} (other work on the machine shares the two cores: compare figures within a run).
- Upstream: synthetic Zulip ${o.flavour} with ${o.users} users, ${fmt((o.churn as number) * 100)} % of them changing per minute, pre-serialised answers.

${renderTable(r)}

${renderCosts(r)}
${(r.details.b4 as { table?: string } | undefined)?.table ? `\n### B4, every target side by side\n\n${(r.details.b4 as { table: string }).table}\n` : ''}
## Reading the figures

${renderNotes(r)}

## How each figure is measured

${(r.details.method as string[]).map((m) => `- ${m}`).join('\n')}
`;
}
