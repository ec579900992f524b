/**
 * The layer check (`npm run lint:layers`, in CI): no import cycle between modules, and each
 * folder of src/ imports only the folders below it. Read bottom to top: a folder may import
 * itself and those it names, nothing else in src/. Type-only imports count: an arrow is an arrow.
 */
const LAYERS = {
  // the embedding API's entry points (package.json "exports"), above all the rest
  testing: ['index'],
  express: ['http', 'index'],
  index: ['config', 'embed', 'observability', 'open-upstream'],
  // a shim composed as its configuration asks (the CLI's and the embedding API's one way)
  embed: ['config', 'observability', 'open-upstream', 'server'],
  'open-upstream': ['config', 'har', 'observability', 'version'],
  // primitives
  version: [],
  http: [],
  observability: ['http', 'version'],
  config: ['http', 'version'],
  cache: [],
  // the upstream: its client, answers, users and feature levels
  upstream: ['cache', 'http', 'observability'],
  // presence semantics: the ledger, conversions, the poll's plan and its interpreter
  presence: ['cache', 'config', 'http', 'observability', 'upstream'],
  // where large answers are read off the main thread (both kinds)
  parse: ['http', 'presence', 'upstream'],
  // where ledgers live (implements presence/ledger-store.ts)
  store: ['cache', 'config', 'observability', 'presence'],
  // the composition's types: what every handler may be given
  context: ['config', 'observability', 'parse', 'presence', 'upstream'],
  // the API changes the shim bridges, both directions, one module each (U2, V1, M2)
  changes: ['upstream'],
  profile: ['cache', 'changes', 'context', 'http', 'observability', 'upstream'],
  // the mobile app's presented level and the requests it translates (M1, M2)
  app: ['cache', 'changes', 'config', 'context', 'http', 'observability', 'profile', 'upstream'],
  register: ['app', 'changes', 'context', 'http', 'observability', 'presence', 'profile', 'upstream'],
  proxy: ['http', 'observability', 'upstream'],
  // the push relay between an old server and its push bouncer (M7)
  push: ['changes', 'http', 'observability', 'upstream'],
  har: ['http', 'observability', 'proxy', 'upstream', 'version'],
  'server-settings': ['app', 'changes', 'context', 'http', 'observability', 'upstream', 'version'],
  // the composition root's parts (server.ts wires them): what SIGHUP may change, the services
  // every handler is given, and the dispatch of a request to its route
  'live-settings': ['config', 'http', 'observability', 'realm-hosts'],
  services: ['cache', 'config', 'context', 'live-settings', 'observability', 'parse', 'presence', 'store', 'upstream'],
  dispatch: ['app', 'context', 'http', 'live-settings', 'observability', 'proxy', 'routes', 'upstream'],
  'realm-hosts': [],
  runtime: [],
  signals: [],
};

/** A folder of src/, or a module at its top (src/signals.ts is "signals"). */
const pathOf = (layer) => `^src/${layer}(/|\\.ts$)`;

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import cycle: split the module or move what both need below them.',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'cli-loads-the-shim-late',
      severity: 'error',
      comment:
        'src/cli.ts imports the shim (serve.ts and what it needs) only dynamically, when it serves or checks: --healthcheck (the image runs it every 30 s), --version and --help need the configuration alone (and a serving run its held signals)',
      from: { path: '^src/cli\\.ts$' },
      to: { path: '^src/', pathNot: ['^src/config/', '^src/(signals|version)\\.ts$'], dependencyTypesNot: ['dynamic-import'] },
    },
    ...Object.entries(LAYERS).map(([layer, below]) => ({
      name: `layer-${layer}`,
      severity: 'error',
      comment: `src/${layer} may import only: ${below.join(', ') || 'nothing else in src/'}`,
      from: { path: pathOf(layer) },
      to: { path: '^src/', pathNot: [layer, ...below].map(pathOf) },
    })),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    includeOnly: '^src/',
  },
};
