import { serveParent } from './children.js';
import { SyntheticZulip, type Flavour } from './synthetic-upstream.js';

/**
 * The synthetic upstream in a process of its own.
 * argv: flavour users churnPerMinute minuteMs [realm-per-host]
 */

const [flavour = '2.1', users = '10000', churn = '0.02', minuteMs = '60000', realms] = process.argv.slice(2);
const upstream = new SyntheticZulip({
  flavour: flavour as Flavour,
  users: Number(users),
  churnPerMinute: Number(churn),
  minuteMs: Number(minuteMs),
  realmPerHost: realms === 'realm-per-host',
});
const url = await upstream.start();
let cpuMark = process.cpuUsage();

serveParent(
  url,
  {
    stats: () => ({ ...upstream.stats, simNow: upstream.simNow() }),
    'reset-stats': () => {
      upstream.stats = SyntheticZulip.emptyStats();
      upstream.fetchTimes = [];
    },
    /** Arrival times of full presence fetches (ms, this process's clock) and the clock now. */
    'fetch-times': () => ({ times: upstream.fetchTimes, now: performance.now() }),
    /** args: { minuteMs } */
    clock: (a) => upstream.setMinute((a as { minuteMs: number }).minuteMs),
    churn: (a) => ((a as { on: boolean }).on ? upstream.startChurn() : upstream.stopChurn()),
    /** args: { user }: that user reports active now; the simulated time of it (seconds). */
    touch: (a) => upstream.touch((a as { user: number }).user),
    /** CPU time used since the last call (ms). */
    cpu: () => {
      const d = process.cpuUsage(cpuMark);
      cpuMark = process.cpuUsage();
      return (d.user + d.system) / 1000;
    },
  },
  () => upstream.stop(),
);
