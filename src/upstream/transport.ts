import type { IncomingHttpHeaders } from 'node:http';
import type { Duplex } from 'node:stream';
import { Client, Pool, errors as undiciErrors, type Dispatcher } from 'undici';
import { ShimError, UpstreamTimeoutError, upstreamBadResponse, upstreamUnavailable } from '../http/errors.js';
import { isLongPoll, routeLabel, type RouteLabel } from '../http/api-routes.js';
import type { UpstreamObserver } from '../observability/upstream-metrics.js';

/**
 * The one way to the upstream: a composed undici dispatcher shared by the pass-through, the
 * shim's own calls (presence, profile, register, lookups, version detection), and through them
 * the recorder and replay. Each concern is one named interceptor, in the manner of
 * `undici/lib/interceptor/*` (`dispatch => (opts, handler) => …`), applied from the outside in:
 *
 *   observeExchange   metrics: route, status class or why there was no answer, time to headers
 *   translateErrors   every failure becomes the shim's own error type (E2)
 *   totalDeadline     a buffered exchange ends within its deadline, however bytes drip (X3)
 *   routeLongPolls    GET /events to a pool of its own, uncapped (T1)
 *   routePassThrough  other passed-through requests to a pool apart from the shim's own calls, uploads to one of their own (X11)
 *   retrySafely       an idempotent request cut before any answer byte: once more, on a fresh connection (X5)
 *
 * The same chain is offered twice: `dispatch`, composed here by plain function application,
 * for handlers that speak undici's current handler API (the pass-through, the recorder), and
 * `dispatcher`, undici's `compose` of it, for its promise API (`request`), whose handler speaks
 * the older one and needs the adapter `compose` puts at every layer. The pass-through runs on
 * every proxied request, so it skips that adapter and the Proxy `compose` returns (bench B4).
 */

/** Extra dispatch options the interceptors read (undici ignores unknown keys). */
export interface UpstreamDispatchOptions extends Dispatcher.DispatchOptions {
  /** X3: the whole exchange, headers to last body byte, must end within this many ms. */
  deadlineMs?: number;
  /** The metrics route label, when the caller already knows it (else it is derived from the path). */
  route?: RouteLabel;
  /** A long poll, when the caller already knows (else it is derived from the method and path). */
  longPoll?: boolean;
  /**
   * X11: a client's request passed through, whose body streams from the client at its pace: it
   * goes to the pass-through's own pool, so it can never take a connection the shim's own calls
   * (presence, lookups, register) need.
   */
  passThrough?: boolean;
  /**
   * X11: a passed-through request whose body is still arriving (an upload): to a pool of its
   * own, so that clients dripping their bodies never hold the connections other passed-through
   * requests (fetching messages, the web app) need.
   */
  upload?: boolean;
}

export interface TransportOptions {
  /** Where requests go: the upstream itself, or the recorder/replayer standing in for it. */
  target: string;
  /** Silence timeout for headers and between body bytes; a streamed long poll lives within it. */
  timeoutMs: number;
  /** Kept-alive connections for everything but long polls. */
  maxSockets: number;
  insecureTls: boolean;
  /** Metrics hook: told of every exchange when its headers arrive or it fails. */
  observe?: UpstreamObserver | undefined;
  /** X5: send a safe request once more when its kept-alive connection broke first. @default true */
  retry?: boolean;
}

export type Dispatch = (opts: UpstreamDispatchOptions, handler: Dispatcher.DispatchHandler) => boolean;

export interface Transport {
  /** The chain for a handler of undici's current API (onRequestStart, onResponseStart, …). */
  readonly dispatch: Dispatch;
  /** The same chain as a Dispatcher, for undici's promise API (`request`). */
  readonly dispatcher: Dispatcher;
  close(): Promise<void>;
}

/** Idle upstream connections are kept this long (below a typical upstream nginx's 75 s). */
const KEEP_ALIVE_MS = 30_000;

/** X5: only these may be sent twice (RFC 9110 §9.2.2 safe methods; nginx's non-idempotent rule). */
const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Failures that mean the connection broke under a request, not that the upstream refused or was slow. */
const CONNECTION_BROKE: ReadonlySet<string> = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

const codeOf = (e: unknown): string => {
  const err = e as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  return err.code ?? err.cause?.code ?? 'error';
};

/** An upstream transport failure as the shim's own error (E2): timed out, unreachable, too large. */
export function translate(e: unknown): Error {
  if (e instanceof ShimError) return e;
  if (e instanceof undiciErrors.HeadersTimeoutError || e instanceof undiciErrors.BodyTimeoutError) return new UpstreamTimeoutError();
  if (e instanceof undiciErrors.ResponseExceededMaxSizeError) return upstreamBadResponse('body too large');
  return upstreamUnavailable(codeOf(e));
}

/** Does this failure mean the request could not be sent as it came (the client's error, not the upstream's)? */
export const isUnsendable = (e: unknown): boolean => e instanceof undiciErrors.InvalidArgumentError;

/** Is this the abort of a request whose client went away (nothing to answer)? */
export const isClientAbort = (e: unknown): boolean =>
  e instanceof undiciErrors.RequestAbortedError || (e as Error | undefined)?.name === 'AbortError';

type DispatchHandler = Dispatcher.DispatchHandler;
type Controller = Dispatcher.DispatchController;
type Interceptor = Dispatcher.DispatcherComposeInterceptor;

/** Passes every callback on unchanged; the interceptors' handlers override what they need. */
class Forward implements DispatchHandler {
  constructor(protected readonly next: DispatchHandler) {}
  onRequestStart(c: Controller, context: unknown) {
    this.next.onRequestStart?.(c, context);
  }
  onRequestUpgrade(c: Controller, status: number, headers: IncomingHttpHeaders, socket: Duplex) {
    this.next.onRequestUpgrade?.(c, status, headers, socket);
  }
  onResponseStart(c: Controller, status: number, headers: IncomingHttpHeaders, message?: string) {
    this.next.onResponseStart?.(c, status, headers, message);
  }
  onResponseData(c: Controller, chunk: Buffer) {
    this.next.onResponseData?.(c, chunk);
  }
  onResponseEnd(c: Controller, trailers: IncomingHttpHeaders) {
    this.next.onResponseEnd?.(c, trailers);
  }
  onResponseError(c: Controller, err: Error) {
    this.next.onResponseError?.(c, err);
  }
}

// ---- observeExchange ------------------------------------------------------------------------

class Observed extends Forward {
  private readonly started = performance.now();
  private told = false;
  constructor(
    next: DispatchHandler,
    private readonly route: RouteLabel,
    private readonly observe: UpstreamObserver,
  ) {
    super(next);
  }
  private tell(outcome: number | 'error' | 'timeout') {
    if (this.told) return;
    this.told = true;
    this.observe(this.route, outcome, (performance.now() - this.started) / 1000);
  }
  override onResponseStart(c: Controller, status: number, headers: IncomingHttpHeaders, message?: string) {
    if (status >= 200) this.tell(status);
    super.onResponseStart(c, status, headers, message);
  }
  override onResponseError(c: Controller, err: Error) {
    // A client that went away is not an upstream outcome.
    if (!isClientAbort(err)) this.tell(err instanceof UpstreamTimeoutError ? 'timeout' : 'error');
    super.onResponseError(c, err);
  }
}

/** Metrics: one observation per exchange, when its headers arrive or it fails. */
export const observeExchange =
  (observe: UpstreamObserver | undefined): Interceptor =>
  (dispatch) =>
    observe
      ? (opts, handler) => dispatch(opts, new Observed(handler, (opts as UpstreamDispatchOptions).route ?? routeLabel(opts.path), observe))
      : dispatch;

// ---- translateErrors ------------------------------------------------------------------------

class Translated extends Forward {
  override onResponseError(c: Controller, err: Error) {
    // Aborts asked for by the caller and arguments undici refuses stay as they are: the caller decides.
    super.onResponseError(c, isClientAbort(err) || isUnsendable(err) ? err : translate(err));
  }
}

/** E2: every upstream failure reaches callers as a ShimError subclass. */
export const translateErrors = (): Interceptor => (dispatch) => (opts, handler) => dispatch(opts, new Translated(handler));

// ---- totalDeadline --------------------------------------------------------------------------

class Deadline extends Forward {
  private controller: Controller | undefined;
  private done = false;
  private readonly timer: NodeJS.Timeout;
  constructor(next: DispatchHandler, ms: number) {
    super(next);
    this.timer = setTimeout(() => this.expire(), ms);
  }
  private expire() {
    if (this.done) return;
    const err = new UpstreamTimeoutError();
    if (this.controller) {
      this.controller.abort(err); // the error comes back through onResponseError
      return;
    }
    // Still queued for a connection: the caller is released now; the request is dropped when it starts.
    this.done = true;
    this.next.onResponseError?.(idle, err);
  }
  private finish() {
    this.done = true;
    clearTimeout(this.timer);
  }
  override onRequestStart(c: Controller, context: unknown) {
    this.controller = c;
    if (this.done) {
      c.abort(new UpstreamTimeoutError());
      return;
    }
    super.onRequestStart(c, context);
  }
  override onResponseStart(c: Controller, status: number, headers: IncomingHttpHeaders, message?: string) {
    if (!this.done) super.onResponseStart(c, status, headers, message);
  }
  override onResponseData(c: Controller, chunk: Buffer) {
    if (!this.done) super.onResponseData(c, chunk);
  }
  override onResponseEnd(c: Controller, trailers: IncomingHttpHeaders) {
    if (this.done) return;
    this.finish();
    super.onResponseEnd(c, trailers);
  }
  override onResponseError(c: Controller, err: Error) {
    if (this.done) return;
    this.finish();
    super.onResponseError(c, err);
  }
}

/** A controller for a request that never started: nothing to pause or abort. */
const idle: Controller = { aborted: false, paused: false, reason: null, abort() {}, pause() {}, resume() {} };

/** X3: a request with `deadlineMs` ends within it, from dispatch to the last body byte. */
export const totalDeadline = (): Interceptor => (dispatch) => (opts, handler) => {
  const ms = (opts as UpstreamDispatchOptions).deadlineMs;
  return dispatch(opts, ms === undefined ? handler : new Deadline(handler, ms));
};

// ---- routeLongPolls -------------------------------------------------------------------------

/** T1: long polls go to their own dispatcher, so waiting clients never hold the rest back. */
export const routeLongPolls =
  (longPolls: Dispatch): Interceptor =>
  (dispatch) =>
  (opts, handler) =>
    ((opts as UpstreamDispatchOptions).longPoll ?? isLongPoll(opts.method, opts.path)) ? longPolls(opts, handler) : dispatch(opts, handler);

// ---- routePassThrough -----------------------------------------------------------------------

/**
 * X11: passed-through requests to a pool of their own, and uploads among them to another. A
 * client that drips its body holds an upstream connection for as long as it drips; in one
 * shared pool enough of them would leave the shim's own calls (every presence poll, own profile
 * and lookup) waiting, and in the pass-through's every other passed-through request.
 */
export const routePassThrough =
  (passThrough: Dispatch, uploads: Dispatch): Interceptor =>
  (dispatch) =>
  (opts, handler) => {
    const o = opts as UpstreamDispatchOptions;
    return o.passThrough ? (o.upload ? uploads : passThrough)(opts, handler) : dispatch(opts, handler);
  };

// ---- retrySafely ----------------------------------------------------------------------------

/**
 * The controller the handler above a SafeRetry sees: one for the whole request, acting on
 * whichever attempt is under way (a class, not closures: it is made for every GET).
 */
class RetryController implements Controller {
  current: Controller | undefined;
  abortedWith: Error | undefined;
  get aborted() {
    return this.abortedWith !== undefined;
  }
  get paused() {
    return this.current?.paused ?? false;
  }
  get reason() {
    return this.abortedWith ?? null;
  }
  // The answer's header list as it came (names' case and order), for the recorder.
  get rawHeaders() {
    return this.current?.rawHeaders;
  }
  abort(reason: Error) {
    this.abortedWith ??= reason;
    this.current?.abort(reason);
  }
  pause() {
    this.current?.pause();
  }
  resume() {
    this.current?.resume();
  }
}

/**
 * One request that may be sent a second time: the handler above sees one controller and one
 * start, whichever attempt answers.
 */
class SafeRetry implements DispatchHandler {
  private started = false;
  private answered = false;
  private retried = false;
  private fresh: Client | undefined;
  private readonly outer = new RetryController();

  constructor(
    private readonly next: DispatchHandler,
    private readonly opts: Dispatcher.DispatchOptions,
    private readonly freshConnection: () => Client,
  ) {}

  onRequestStart(c: Controller, context: unknown) {
    this.outer.current = c;
    if (this.outer.abortedWith) c.abort(this.outer.abortedWith);
    if (this.started) return;
    this.started = true;
    this.next.onRequestStart?.(this.outer, context);
  }
  onRequestUpgrade(_c: Controller, status: number, headers: IncomingHttpHeaders, socket: Duplex) {
    this.next.onRequestUpgrade?.(this.outer, status, headers, socket);
  }
  onResponseStart(_c: Controller, status: number, headers: IncomingHttpHeaders, message?: string) {
    this.answered = true;
    this.next.onResponseStart?.(this.outer, status, headers, message);
  }
  onResponseData(_c: Controller, chunk: Buffer) {
    this.next.onResponseData?.(this.outer, chunk);
  }
  onResponseEnd(_c: Controller, trailers: IncomingHttpHeaders) {
    this.release();
    this.next.onResponseEnd?.(this.outer, trailers);
  }
  onResponseError(_c: Controller, err: Error) {
    if (!this.answered && !this.retried && !this.outer.abortedWith && CONNECTION_BROKE.has(codeOf(err))) {
      // X5: the connection (a kept-alive one the upstream had just closed) broke before any
      // answer byte: once more, on a connection of its own.
      this.retried = true;
      this.fresh = this.freshConnection();
      this.fresh.dispatch(this.opts, this);
      return;
    }
    this.release();
    this.next.onResponseError?.(this.outer, err);
  }
  private release() {
    if (this.fresh) void this.fresh.close().catch(() => {}); // closing a one-request client cannot lose anything
    this.fresh = undefined;
  }
}

/** A body that can be sent again as it is (a stream cannot). */
const resendable = (body: Dispatcher.DispatchOptions['body']): boolean =>
  body === undefined || body === null || typeof body === 'string' || body instanceof Uint8Array;

/** X5: GET/HEAD/OPTIONS whose connection broke before any answer byte are sent once more; nothing else ever is. */
export const retrySafely =
  (freshConnection: () => Client): Interceptor =>
  (dispatch) =>
  (opts, handler) =>
    SAFE_METHODS.has(opts.method) && resendable(opts.body) && !opts.upgrade
      ? dispatch(opts, new SafeRetry(handler, opts, freshConnection))
      : dispatch(opts, handler);

// ---- the transport --------------------------------------------------------------------------

/** Interceptors applied to a dispatcher's own dispatch, innermost first (what `compose` does, minus its adapters). */
function applied(base: Dispatcher, interceptors: readonly Interceptor[]): Dispatch {
  let dispatch = base.dispatch.bind(base) as Dispatch;
  for (const interceptor of interceptors) dispatch = interceptor(dispatch) as Dispatch;
  return dispatch;
}

export function createTransport(o: TransportOptions): Transport {
  const poolOptions = {
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    keepAliveTimeout: KEEP_ALIVE_MS,
    connect: { rejectUnauthorized: !o.insecureTls },
  };
  // The shim's own calls (X11: never behind a client's request).
  const pool = new Pool(o.target, { ...poolOptions, connections: o.maxSockets });
  // Everything else passed through, but long polls and uploads.
  const passThroughPool = new Pool(o.target, { ...poolOptions, connections: o.maxSockets });
  // Passed-through requests whose bodies are still arriving (X11).
  const uploadPool = new Pool(o.target, { ...poolOptions, connections: o.maxSockets });
  // One connection per waiting client, as without the shim: more waiting clients than
  // maxSockets must never hold the rest of the traffic back (T1).
  const longPollPool = new Pool(o.target, { ...poolOptions, connections: null });
  const freshConnection = () => new Client(o.target, { ...poolOptions, pipelining: 1 });
  const retry: Interceptor[] = o.retry === false ? [] : [retrySafely(freshConnection)];
  const longPolls = applied(longPollPool, retry);
  const passedThrough = applied(passThroughPool, retry);
  // No retry: an upload's body is a stream, which cannot be sent twice.
  const uploads = applied(uploadPool, []);
  // Innermost first: the last one applied sees the request first.
  const dispatch = applied(pool, [
    ...retry,
    routePassThrough(passedThrough, uploads),
    routeLongPolls(longPolls),
    totalDeadline(),
    translateErrors(),
    observeExchange(o.observe),
  ]);
  let closing: Promise<void> | undefined;
  return {
    dispatch,
    dispatcher: pool.compose(() => dispatch),
    close() {
      closing ??= Promise.all([pool.destroy(), passThroughPool.destroy(), uploadPool.destroy(), longPollPool.destroy()]).then(
        () => undefined,
      );
      return closing;
    },
  };
}
